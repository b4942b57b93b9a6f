# Four threads build, grow and hash large bytearrays (100 KB to 8 MB); prints one digest per
# thread. Run by `vmarena preload` and the shim's tests: python3 -c "<this file>" ROUNDS
import sys, threading, hashlib
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 400
out = [None] * 4
def work(t):
    h = hashlib.sha256()
    keep = []
    for i in range(rounds):
        n = 100_000 + ((t * 7919 + i * 104729) % 8_000_000)
        b = bytearray(n)
        b[0:n:4096] = bytes([(t + i) % 251]) * len(range(0, n, 4096))
        b.extend(b"x" * 70_000)
        h.update(b[::8191])
        keep.append(b)
        if len(keep) > 8:
            keep.pop(0)
    out[t] = h.hexdigest()
ts = [threading.Thread(target=work, args=(t,)) for t in range(4)]
[t.start() for t in ts]
[t.join() for t in ts]
print("\n".join(out))
