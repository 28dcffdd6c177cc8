"""epath_py312.py SRC DST: enhanced_pathlib's EPath, ported to Python >= 3.12 (written to DST).

enhanced_pathlib (kot-begemot-uk/enhanced_pathlib) builds an EPath in __new__ with
PosixPath._from_parts(args), a private pathlib method that Python 3.12 removed (pathlib there
builds a path in __init__ from the arguments). On 3.12, EPath(...) therefore raises
AttributeError before TCE can read any file. The port keeps the old path where _from_parts
exists and otherwise lets PosixPath.__init__ take the arguments; nothing else changes. Prints
the unified diff; exits 1 if the source is not the text this port was written for.
"""

import difflib
import sys
from pathlib import Path

OLD_NEW = "        cls = EPath\n        self = cls._from_parts(args)\n        return self\n"
NEW_NEW = ("        cls = EPath\n"
           "        if not hasattr(PosixPath, \"_from_parts\"):  # Python >= 3.12: __init__ takes args\n"
           "            return object.__new__(cls)\n"
           "        self = cls._from_parts(args)\n        return self\n")
OLD_INIT = "    def __init__(self, *args, signed=None, compress=None, signature=None, key=None):\n"
NEW_INIT = OLD_INIT + ("        if not hasattr(PosixPath, \"_from_parts\"):\n"
                       "            super().__init__(*args)\n")


def main():
    src, dst = Path(sys.argv[1]), Path(sys.argv[2])
    text = src.read_text()
    if text.count(OLD_NEW) != 1 or text.count(OLD_INIT) != 1:
        sys.exit(f"epath_py312: {src} is not the source this port was written for")
    ported = text.replace(OLD_NEW, NEW_NEW).replace(OLD_INIT, NEW_INIT)
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(ported)
    sys.stdout.writelines(difflib.unified_diff(text.splitlines(True), ported.splitlines(True),
                                               "a/enhanced_pathlib/__init__.py",
                                               "b/enhanced_pathlib/__init__.py"))


if __name__ == "__main__":
    main()
