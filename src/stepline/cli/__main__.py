"""``python -m stepline.cli``: the same as the ``stepline`` script."""

from ._app import main

if __name__ == "__main__":
    main()
