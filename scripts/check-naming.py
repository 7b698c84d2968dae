#!/usr/bin/env python3
"""The naming rule for functions outside the public headers.

clang-tidy checks every name in include/ddp/ (scripts/check-style.sh); running
it over every translation unit of src/ and tests/ would take most of CI's
style leg, so this check reads the sources instead. It finds every function
or method declared or defined, and every lambda given a name, in src/, tests/,
benchmarks/, examples/ and tools/, and reports each whose name is camelCase
where CONTRIBUTING.md asks for snake_case (`run_ranks`, not `runRanks`).

Exempt: overrides of LibTorch's virtual methods (c10d::Store's `getNumKeys`,
`deleteKey`, ...), whose names are LibTorch's. A name is exempt when a
declaration of it in this tree says `override` and no base class here declares
it without.

    python3 scripts/check-naming.py [ROOT]

Prints one line per finding (file:line: name -> suggested name) and exits 1
when there is any; prints a count and exits 0 otherwise.
"""

import pathlib
import re
import sys

FOLDERS = ("src", "tests", "benchmarks", "examples", "tools", "include")
SUFFIXES = (".cpp", ".hpp", ".h", ".cu")
CAMEL = r"[a-z][a-z0-9]*[A-Z][A-Za-z0-9_]*"

# A declaration or definition: a type (words, ::, <>, *, &, commas) then the
# name, qualified or not, then "(". Lines that start with a statement keyword
# are calls, not declarations.
DECLARATION = re.compile(
    r"^\s*(?:template\s*<[^>]*>\s*)?"
    r"(?:(?:static|inline|virtual|constexpr|explicit|friend|extern|\[\[\w+\]\])\s+)*"
    r"[A-Za-z_][\w:<>,*&\s]*?[\s*&]+(?:\w+::)*(" + CAMEL + r")\s*\(")
LAMBDA = re.compile(r"\bauto\s*&{0,2}\s*(" + CAMEL + r")\s*=\s*\[")
STATEMENT = re.compile(r"^\s*(return|else|throw|case|new|delete|co_return|goto|using)\b")
CONSTANT = re.compile(r"k[A-Z]")  # kCamelCase constants, constructed with (...)
OVERRIDE = re.compile(r"\b(" + CAMEL + r")\s*\([^;{]*\)\s*(?:const\s*)?(?:noexcept\s*)?override\b")


def snake(name: str) -> str:
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return name.lower()


def strip_comments_and_strings(text: str) -> str:
    """Blanks comments and string literals, keeping line numbers."""
    def blank(match: re.Match) -> str:
        return re.sub(r"[^\n]", " ", match.group(0))
    return re.sub(r'//[^\n]*|/\*.*?\*/|"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'',
                  blank, text, flags=re.S)


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    files = sorted(p for folder in FOLDERS for p in (root / folder).rglob("*")
                   if p.suffix in SUFFIXES and p.is_file())
    sources = {p: strip_comments_and_strings(p.read_text(errors="replace")) for p in files}

    overrides = {m.group(1) for text in sources.values() for m in OVERRIDE.finditer(text)}
    findings = []
    for path, text in sources.items():
        for number, line in enumerate(text.splitlines(), start=1):
            if STATEMENT.match(line) or "=" in line.split("(")[0] and not LAMBDA.search(line):
                continue
            for pattern in (DECLARATION, LAMBDA):
                match = pattern.search(line)
                if match and match.group(1) not in overrides and not CONSTANT.match(match.group(1)):
                    name = match.group(1)
                    findings.append(f"{path.relative_to(root)}:{number}: {name} -> {snake(name)}")
    for finding in findings:
        print(finding)
    if findings:
        print(f"check-naming: {len(findings)} function name(s) in camelCase; "
              "CONTRIBUTING.md's rule is snake_case (rename as suggested)")
        return 1
    print(f"check-naming: every function and named lambda in {len(files)} files is snake_case")
    return 0


if __name__ == "__main__":
    sys.exit(main())
