"""``python -m vmsched_router``, as the ``vmsched-router`` console script."""

from vmsched_router.main import main

main()
