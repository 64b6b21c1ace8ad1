#!/usr/bin/env python3
"""same_validation.py SERIAL.txt RUN.txt NAME: the validation losses a parallel run printed (the
"validation ..." lines' val_*loss values, 4 decimals: train_gpt2's val_loss, train_bert's
val_mlm_loss and val_nsp_loss) equal the serial run's, for values within 1e-5 relative
(|x - y| <= 1e-4 + 1e-5 |x|); both print the same number of lines with such values (2) with the same keys.
Used by the train_gpt2 and train_bert parallel tests. Exit status 1 when they differ."""
import re
import sys


def vals(path):
    lines = re.findall(r"^validation .*$", open(path).read(), re.M)
    return [v for v in (re.findall(r"\b(val_\w*loss) (\S+)", line) for line in lines) if v]


serial, run, name = sys.argv[1], sys.argv[2], sys.argv[3]
a, b = vals(serial), vals(run)
if not len(a) == len(b) == 2:
    sys.exit(f"{name}: {len(a)} serial and {len(b)} validation lines, 2 expected")
for la, lb in zip(a, b):
    if not la or [k for k, _ in la] != [k for k, _ in lb]:
        sys.exit(f"{name}: serial validation losses {la}, this run's {lb}")
    for (k, x), (_, y) in zip(la, lb):
        x, y = float(x), float(y)
        if abs(x - y) > 1e-4 + 1e-5 * abs(x):
            sys.exit(f"{name}: serial validation {k} {x}, this run's {y}")
print(f"{name}: the serial run's validation losses: {b}")
