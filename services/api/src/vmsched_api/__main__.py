"""``python -m vmsched_api``, as the ``vmsched-api`` console script."""

from vmsched_api.main import main

main()
