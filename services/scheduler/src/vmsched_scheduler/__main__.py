from vmsched_scheduler.main import main

main()
