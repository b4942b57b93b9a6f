# Large bytes objects as a data-processing script makes them: a text of LINES lines joined from
# pieces, compressed and decompressed with zlib at two levels, cut into 1 MiB parts and joined
# again in reverse; prints one digest and the text's length. Run by `vmarena programs`:
# python3 -c "<this file>" LINES
import hashlib, sys, zlib
lines = int(sys.argv[1]) if len(sys.argv) > 1 else 3_000_000
data = b"".join(b"%08d record %d of the batch\n" % (i, i * 7919 % 1000) for i in range(lines))
h = hashlib.sha256()
for level in (1, 6):
    packed = zlib.compress(data, level)
    if zlib.decompress(packed) != data:
        sys.exit("zlib round trip differs")
    h.update(packed)
parts = [data[i:i + (1 << 20)] for i in range(0, len(data), 1 << 20)]
h.update(hashlib.sha256(b"".join(reversed(parts))).digest())
print(h.hexdigest(), len(data))
