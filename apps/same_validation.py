#!/usr/bin/env python3
"""same_validation.py SERIAL.txt RUN.txt NAME: the validation losses a parallel run printed
(train_gpt2's "validation ... val_loss X" lines, 4 decimals) equal the serial run's, for values
within 1e-5 relative (|x - y| <= 1e-4 + 1e-5 |x|); both print the same number of them (2).
Used by train_gpt2_dp_test.sh and train_gpt2_pp_test.sh. Exit status 1 when they differ."""
import re
import sys


def vals(path):
    return [float(m.group(1)) for m in re.finditer(r"^validation .*: val_loss (\S+)", open(path).read(), re.M)]


serial, run, name = sys.argv[1], sys.argv[2], sys.argv[3]
a, b = vals(serial), vals(run)
if not len(a) == len(b) == 2:
    sys.exit(f"{name}: {len(a)} serial and {len(b)} validation lines, 2 expected")
for x, y in zip(a, b):
    if abs(x - y) > 1e-4 + 1e-5 * abs(x):
        sys.exit(f"{name}: serial validation loss {x}, this run's {y}")
print(f"{name}: the serial run's validation losses: {b}")
