from vmsched_api.main import main

main()
