# The functions of one shared library a program runs, in the order they first ran
# (`vmarena layout`): gdb -batch -x first_calls.py --args PROGRAM ARGS...
#
# Environment:
#   FIRST_CALLS_LIB      part of the library's path ("libvmarena.so")
#   FIRST_CALLS_SYMBOLS  a file of "OFFSET NAME" lines (hex offsets in the library, as nm prints)
#   FIRST_CALLS_OUT      the file the names are appended to, one a line
#   FIRST_CALLS_PRELOAD  optional: LD_PRELOAD for the program (not for gdb itself)
#
# The program stops when the loader has mapped the library, before any of its code runs; every
# function then gets a temporary breakpoint at its first instruction, so each stops the program
# once, the first time any thread calls it, and is gone after. The program runs natively
# otherwise: its own CPU ids (rseq), threads and timers, unlike under an instruction-level
# tool, which would send it down other paths.
import os

import gdb

lib = os.environ["FIRST_CALLS_LIB"]
out = os.environ["FIRST_CALLS_OUT"]
symbols = []
with open(os.environ["FIRST_CALLS_SYMBOLS"]) as f:
    for line in f:
        offset, name = line.split(None, 1)
        symbols.append((int(offset, 16), name.strip()))

for setting in ("pagination off", "confirm off", "print thread-events off", "breakpoint pending off",
                "startup-with-shell off"):
    gdb.execute("set " + setting)
if os.environ.get("FIRST_CALLS_PRELOAD"):
    gdb.execute("set environment LD_PRELOAD " + os.environ["FIRST_CALLS_PRELOAD"])
gdb.execute("catch load " + lib)
gdb.execute("run", to_string=True)


def load_base():
    pid = gdb.selected_inferior().pid
    with open("/proc/%d/maps" % pid) as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 6 and lib in fields[5] and int(fields[2], 16) == 0:
                return int(fields[0].split("-")[0], 16)
    raise gdb.GdbError(lib + " is not mapped")


base = load_base()
gdb.execute("delete")
name_at = {}
for offset, name in symbols:
    if base + offset not in name_at:
        name_at[base + offset] = name
        gdb.Breakpoint("*0x%x" % (base + offset), internal=True, temporary=True)

ran = []


def on_stop(event):
    if isinstance(event, gdb.BreakpointEvent):
        name = name_at.get(int(gdb.parse_and_eval("$pc")))
        if name is not None:
            ran.append(name)


gdb.events.stop.connect(on_stop)
while gdb.selected_inferior().pid:
    try:
        gdb.execute("continue", to_string=True)
    except gdb.error:
        break
with open(out, "a") as f:
    f.write("".join(name + "\n" for name in ran))
