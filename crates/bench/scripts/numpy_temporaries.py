# Array expressions with large temporaries, the shape of numerical scripts: two integer arrays
# of N elements, twelve rounds of element-wise expressions (each makes temporaries of N x 8
# bytes), a sort and reductions. Integer arithmetic only, so the printed checksum does not
# depend on how the allocator aligns the arrays. Run by `vmarena programs`:
# python3 -c "<this file>" N
import sys
import numpy as np
n = int(sys.argv[1]) if len(sys.argv) > 1 else 8_000_000
rng = np.random.default_rng(42)
a = rng.integers(0, 1 << 20, n, dtype=np.int64)
b = rng.integers(0, 1 << 20, n, dtype=np.int64)
acc = 0
for i in range(12):
    c = (a * b + (a >> 3) - b * i) % 1_000_003
    d = np.sort(c)
    acc += int(d[n // 2]) + int((c > 500_000).sum()) + int(c.sum() % 1_000_000_007)
    a, b = b, (c + a) % (1 << 20)
print(acc)
