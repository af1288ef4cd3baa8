"""`python -m ffnbench.sweep`: the command line of ffnbench.sweep.cli."""

from ffnbench.sweep.cli import main

if __name__ == "__main__":
    main()
