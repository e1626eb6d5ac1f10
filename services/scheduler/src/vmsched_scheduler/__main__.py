"""``python -m vmsched_scheduler``, as the ``vmsched-scheduler`` console script."""

from vmsched_scheduler.main import main

main()
