"""TF 1.x's command-line flags (tf.app.flags, tf.flags): absl's flags as TensorFlow 1.x exposed them.

    flags = tf.app.flags
    flags.DEFINE_integer("max_steps", 2000, "Number of steps to run trainer.")
    FLAGS = flags.FLAGS

    def main(_):
        print(FLAGS.max_steps)

    if __name__ == "__main__":
        tf.app.run()

FLAGS is read from sys.argv by tf.app.run, or on its first attribute access
(as TF 1.x did): "--name=value", "--name value", "-name=value", and for a
boolean "--name", "--noname" or "--name=false". Arguments after "--" and flags
nobody defined are left in argv for main (TF 1.x parses with known_only).
A value that does not parse raises IllegalFlagValueError; tf.app.run prints it
and exits with status 1, as TF's does.

FLAGS is one object per process, as in TensorFlow: flags are defined at
import time by the modules of a program. Defining a name twice raises
DuplicateFlagError.
"""

import sys

__all__ = ["FLAGS", "FlagValues", "Error", "DuplicateFlagError", "IllegalFlagValueError",
           "UnparsedFlagAccessError", "DEFINE_string", "DEFINE_integer", "DEFINE_float",
           "DEFINE_boolean", "DEFINE_bool", "DEFINE_enum", "DEFINE_list"]


class Error(Exception):
    """The base of the flags errors (absl.flags.Error)."""


class DuplicateFlagError(Error):
    """A flag name defined twice."""


class IllegalFlagValueError(Error):
    """A command-line value a flag cannot take."""


class UnparsedFlagAccessError(Error, AttributeError):
    """Never raised by FLAGS (it parses sys.argv on first access, as TF 1.x); kept for code that catches it."""


_TRUE = ("true", "t", "1", "yes", "y")
_FALSE = ("false", "f", "0", "no", "n")


def _parse_bool(text):
    if isinstance(text, bool):
        return text
    low = str(text).lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ValueError(f"{text!r} is not a boolean (true/false, 1/0, yes/no)")


def _parse_int(text):
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    return int(str(text), 0) if str(text).lower().startswith(("0x", "0o", "0b")) else int(str(text))


def _parse_list(text):
    if isinstance(text, (list, tuple)):
        return list(text)
    return [] if text == "" else [s.strip() for s in str(text).split(",")]


class _Flag:
    __slots__ = ("name", "default", "help", "parse", "kind", "value", "present", "enum_values")

    def __init__(self, name, default, help_text, parse, kind, enum_values=None):
        self.name = name
        self.help = help_text
        self.parse = parse
        self.kind = kind
        self.enum_values = enum_values
        self.default = None if default is None else self._convert(default)
        self.value = self.default
        self.present = 0

    def _convert(self, text):
        try:
            value = self.parse(text)
        except (TypeError, ValueError) as e:
            raise IllegalFlagValueError(f"flag --{self.name}={text}: {e}") from None
        if self.enum_values is not None and value not in self.enum_values:
            raise IllegalFlagValueError(
                f"flag --{self.name}={text}: value should be one of <{'|'.join(self.enum_values)}>")
        return value


class FlagValues:
    """A set of flags and their values (absl.flags.FlagValues); FLAGS is the process's."""

    def __init__(self):
        object.__setattr__(self, "_flags", {})
        object.__setattr__(self, "_parsed", False)

    # ---- defining ----
    def _define(self, flag):
        if flag.name in self._flags:
            raise DuplicateFlagError(f"the flag '{flag.name}' is defined twice")
        self._flags[flag.name] = flag

    # ---- parsing ----
    def __call__(self, argv, known_only=False):
        """Parses argv (argv[0] is the program); returns argv[0] plus what it did not take.

        Unknown flags raise Error unless known_only, which leaves them in the result (TF 1.x's way).
        """
        argv = list(argv)
        if not argv:
            raise Error("argv needs at least the program name")
        rest = [argv[0]]
        args = argv[1:]
        i = 0
        while i < len(args):
            arg = args[i]
            i += 1
            if arg == "--":
                rest.extend(args[i - 1:] if known_only else args[i:])
                break
            if not arg.startswith("-") or arg == "-":
                rest.append(arg)
                continue
            body = arg[2:] if arg.startswith("--") else arg[1:]
            name, eq, value = body.partition("=")
            if name in ("help", "helpfull", "h", "?") and name not in self._flags:
                sys.stdout.write(self._usage(argv[0]))
                sys.exit(0)
            flag = self._flags.get(name)
            if flag is None and not eq and name.startswith("no") and name[2:] in self._flags \
                    and self._flags[name[2:]].kind == "bool":
                flag, eq, value = self._flags[name[2:]], "=", "false"
            if flag is None:
                if not known_only:
                    raise Error(f"unknown command line flag '{name}'")
                rest.append(arg)
                continue
            if not eq:
                if flag.kind == "bool":
                    value = "true"
                elif i < len(args):
                    value = args[i]
                    i += 1
                else:
                    raise IllegalFlagValueError(f"flag --{name} needs a value")
            flag.value = flag._convert(value)
            flag.present += 1
        object.__setattr__(self, "_parsed", True)
        return rest

    def is_parsed(self):
        return self._parsed

    def mark_as_parsed(self):
        object.__setattr__(self, "_parsed", True)

    def _usage(self, program):
        lines = [f"usage: {program} [flags]", "", "flags:"]
        for f in sorted(self._flags.values(), key=lambda f: f.name):
            lines.append(f"  --{f.name}: {f.help}")
            lines.append(f"    (default: {f.default!r})")
        return "\n".join(lines) + "\n"

    # ---- reading and writing values ----
    def __getattr__(self, name):
        flags = self.__dict__.get("_flags", {})
        if name not in flags:
            raise AttributeError(f"no flag named '{name}' is defined (tf.app.flags.DEFINE_* it first)")
        if not self._parsed:
            # TF 1.x: the first access parses the command line, leaving what it does not know.
            self(sys.argv if sys.argv and sys.argv[0] is not None else ["program"], known_only=True)
        return flags[name].value

    def __setattr__(self, name, value):
        if name not in self._flags:
            raise AttributeError(f"no flag named '{name}' is defined (tf.app.flags.DEFINE_* it first)")
        self._flags[name].value = value

    def __contains__(self, name):
        return name in self._flags

    def __iter__(self):
        return iter(list(self._flags))

    def __getitem__(self, name):
        return self._flags[name]

    def flag_values_dict(self):
        """{name: value} of every flag."""
        return {n: f.value for n, f in self._flags.items()}

    def get_flag_value(self, name, default):
        f = self._flags.get(name)
        return default if f is None else f.value


FLAGS = FlagValues()


def _define(name, default, help_text, parse, kind, flag_values, enum_values=None):
    if not isinstance(name, str) or not name:
        raise Error(f"a flag needs a non-empty name, got {name!r}")
    (flag_values if flag_values is not None else FLAGS)._define(_Flag(name, default, help_text, parse, kind,
                                                                       enum_values))


def DEFINE_string(name, default, help, flag_values=None, **kwargs):  # noqa: N802,A002 - TF's names
    """A string flag."""
    _define(name, default, help, str, "string", flag_values)


def DEFINE_integer(name, default, help, lower_bound=None, upper_bound=None, flag_values=None,  # noqa: N802,A002
                   **kwargs):
    """An integer flag (optionally within [lower_bound, upper_bound])."""
    def parse(text):
        v = _parse_int(text)
        if (lower_bound is not None and v < lower_bound) or (upper_bound is not None and v > upper_bound):
            raise ValueError(f"{v} is outside [{lower_bound}, {upper_bound}]")
        return v
    _define(name, default, help, parse, "int", flag_values)


def DEFINE_float(name, default, help, lower_bound=None, upper_bound=None, flag_values=None,  # noqa: N802,A002
                 **kwargs):
    """A float flag (optionally within [lower_bound, upper_bound])."""
    def parse(text):
        v = float(text)
        if (lower_bound is not None and v < lower_bound) or (upper_bound is not None and v > upper_bound):
            raise ValueError(f"{v} is outside [{lower_bound}, {upper_bound}]")
        return v
    _define(name, default, help, parse, "float", flag_values)


def DEFINE_boolean(name, default, help, flag_values=None, **kwargs):  # noqa: N802,A002
    """A boolean flag: --name, --noname, --name=true/false."""
    _define(name, default, help, _parse_bool, "bool", flag_values)


DEFINE_bool = DEFINE_boolean


def DEFINE_enum(name, default, enum_values, help, flag_values=None, **kwargs):  # noqa: N802,A002
    """A string flag that takes one of enum_values."""
    _define(name, default, help, str, "string", flag_values, enum_values=list(enum_values))


def DEFINE_list(name, default, help, flag_values=None, **kwargs):  # noqa: N802,A002
    """A comma-separated list of strings."""
    _define(name, default, help, _parse_list, "list", flag_values)
