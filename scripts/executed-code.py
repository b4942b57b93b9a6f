#!/usr/bin/env python3
"""How much of a shared library's code a run executed, from a callgrind profile made with
--dump-instr=yes: the functions of the library that ran, the distinct 4 KiB pages and 64 KiB
windows (the kernel's default fault-around span) their executed instructions lie in, and the
bytes of those functions (their whole symbol sizes, from nm). Addresses are the library's
link-time addresses, as callgrind records them for a shared object. With --ordering FILE, and
profiles made with --demangle=no, it also writes the symbol names of the functions run in all
the profiles given, one per line: a symbol ordering file for the linker.

    scripts/executed-code.py [--ordering FILE] LIBRARY PROFILE ...

    VMARENA_SPACE_BYTES=4G valgrind --tool=callgrind --dump-instr=yes --trace-children=yes \\
        --callgrind-out-file=/tmp/cg.%p env LD_PRELOAD=$PWD/target/release/libvmarena_preload.so \\
        target/release/vmarena-xthread --ops 5000 --idle-ms 1500
    scripts/executed-code.py target/release/libvmarena_preload.so /tmp/cg.<pid>
"""
import os
import re
import subprocess
import sys

NAMED = re.compile(r"^(c?ob|c?fn)=\((\d+)\)(?: (.*))?$")
POSITION = re.compile(r"^(0x[0-9a-f]+|\+\d+|-\d+|\*)(\s|$)")


def executed(profile, library):
    """The functions of `library` that ran and the addresses of their executed instructions."""
    objects, functions = {}, {}
    in_library, functions_run, addresses, address = False, set(), set(), 0
    with open(profile) as lines:
        for line in lines:
            named = NAMED.match(line)
            if named:
                kind, number, name = named.groups()
                table = objects if kind.endswith("ob") else functions
                if name:
                    table[number] = name
                if kind == "ob":
                    in_library = os.path.basename(objects[number]) == library
                elif kind == "fn" and in_library:
                    functions_run.add(functions[number])
                continue
            position = POSITION.match(line)
            if position and in_library:
                token = position.group(1)
                if token.startswith("0x"):
                    address = int(token, 16)
                elif token[0] in "+-":
                    address += int(token)
                addresses.add(address)
    return functions_run, addresses


def symbol_sizes(path, demangled):
    """Code symbols of the library by name: their total size in bytes."""
    command = ["nm", "-S", "-C", path] if demangled else ["nm", "-S", path]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    sizes = {}
    for line in out.splitlines():
        fields = line.split(" ", 3)
        if len(fields) == 4 and fields[2] in "tTwW" and fields[1]:
            sizes[fields[3]] = sizes.get(fields[3], 0) + int(fields[1], 16)
    return sizes


def main():
    args = sys.argv[1:]
    ordering = None
    if args[:1] == ["--ordering"] and len(args) >= 2:
        ordering, args = args[1], args[2:]
    if len(args) < 2:
        sys.exit(__doc__)
    path, profiles = args[0], args[1:]
    text = subprocess.run(["size", "-A", path], capture_output=True, text=True, check=True).stdout
    size, start = next(map(int, l.split()[1:3]) for l in text.splitlines() if l.startswith(".text "))
    end = start + size - 1
    run_anywhere = set()
    for profile in profiles:
        functions_run, addresses = executed(profile, os.path.basename(path))
        if not addresses:
            sys.exit(f"{profile} holds no executed instruction of {os.path.basename(path)}")
        # Callgrind marks a recursive entry with a suffix ('2) that nm does not have.
        functions_run = {f.split("'")[0] for f in functions_run}
        run_anywhere |= functions_run
        mangled = any(f.startswith(("_R", "_Z")) for f in functions_run)
        sizes = symbol_sizes(path, not mangled)
        known = [f for f in functions_run if f in sizes]
        print(f"{profile}:")
        print(f"  functions run: {len(functions_run)} ({len(known)} matched to symbols)")
        print(f"  bytes of those functions: {sum(sizes[f] for f in known)} of {size} in .text")
        print(f"  4 KiB pages with executed code: {len({a >> 12 for a in addresses})}"
              f" of the {(end >> 12) - (start >> 12) + 1} .text spans")
        print(f"  64 KiB windows with executed code: {len({a >> 16 for a in addresses})}"
              f" of the {(end >> 16) - (start >> 16) + 1} .text spans")
    if ordering:
        # Unnamed code (callgrind names it by address) cannot be ordered by name.
        names = sorted(f for f in run_anywhere if not f.startswith("0x"))
        with open(ordering, "w") as out:
            out.write("".join(n + "\n" for n in names))
        print(f"{ordering}: {len(names)} symbols")


if __name__ == "__main__":
    main()
