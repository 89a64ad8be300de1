from agentsched.cli.main import main

main()
