from vmsched_gateway.main import main

main()
