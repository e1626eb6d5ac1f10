"""``python -m vmsched_agent simulate ...``, as the ``vmsched-agent`` console script."""

import sys

from vmsched_agent.cli import main

sys.exit(main())
