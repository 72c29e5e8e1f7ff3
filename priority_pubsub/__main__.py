from priority_pubsub.cli import main

main()
