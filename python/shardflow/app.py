"""TF 1.x's tf.app: run(main) parses the command-line flags and calls main(argv).

    if __name__ == "__main__":
        tf.app.run()              # main from __main__; exits with main's return value
"""

import sys

from . import flags

__all__ = ["run", "flags"]


def run(main=None, argv=None):
    """Parses flags from argv (default sys.argv) and exits with main(remaining argv)'s value, as TF 1.x.

    main defaults to the main function of the __main__ module. The argv main
    gets holds argv[0] and what no defined flag took (TF parses with
    known_only). A value a flag cannot take prints the error and exits with 1.
    """
    argv = list(sys.argv if argv is None else argv)
    try:
        rest = flags.FLAGS(argv, known_only=True)
    except flags.Error as e:
        sys.stderr.write(f"FATAL Flags parsing error: {e}\nPass --help to see the flags.\n")
        sys.exit(1)
    if main is None:
        main = getattr(sys.modules["__main__"], "main", None)
        if main is None:
            raise TypeError("tf.app.run() found no main function in __main__; pass main=")
    sys.exit(main(rest))
