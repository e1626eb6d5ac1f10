"""``python -m vmsched_gateway``, as the ``vmsched-gateway`` console script."""

from vmsched_gateway.main import main

main()
