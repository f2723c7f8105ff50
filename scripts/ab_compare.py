#!/usr/bin/env python3
"""Compares A/B benchmark logs: for every line of the first tree's output with two or more numbers,
the per-field medians over the rounds of each tree, and each field's ratio to the first tree's.

Lines are matched by their text with the numbers taken out (and, among lines of the same text, by
order), so a row that only one tree prints (a kernel variant added or deleted) is reported as
missing instead of shifting every later row.

    scripts/ab_compare.py LOGS ROUNDS "SET..." TREE...   (logs LOGS/<tree>.<set>.round<r>.log)
"""
import re
import statistics
import sys

NUM = re.compile(r"-?\d+(?:\.\d+)?")


def keyed_lines(path):
    """{(text without numbers, occurrence): numbers} of a log, and its keys in order."""
    seen, rows, order = {}, {}, []
    for line in open(path, errors="replace").read().splitlines():
        values = NUM.findall(line)
        if len(values) < 2:
            continue
        text = " ".join(NUM.sub("#", line).split())  # numbers out, spacing of the columns ignored
        k = (text, seen.get(text, 0))
        seen[text] = k[1] + 1
        rows[k] = (line.strip(), [float(v) for v in values])
        order.append(k)
    return rows, order


def main():
    logs, rounds, sets = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
    trees = [t.rstrip("/").split("/")[-1] for t in sys.argv[4:]]
    for s in sets:
        print(f"== {s}: per-field medians over {rounds} rounds; ratio = tree / {trees[0]}")
        runs = {t: [keyed_lines(f"{logs}/{t}.{s}.round{r}.log") for r in range(1, rounds + 1)] for t in trees}
        base_rows, order = runs[trees[0]][0]
        for k in order:
            med = {}
            for t in trees:
                vals = [rows[k][1] for rows, _ in runs[t] if k in rows]
                if len(vals) < rounds:
                    med[t] = None
                    continue
                n = min(len(v) for v in vals)
                med[t] = [statistics.median(v[j] for v in vals) for j in range(n)]
            print("  " + base_rows[k][0][:110])
            for t in trees[1:]:
                if med[t] is None or med[trees[0]] is None:
                    print(f"    {t}: missing")
                    continue
                ratios = ["%.3f" % (b / a) if a != 0.0 else "-" for a, b in zip(med[trees[0]], med[t])]
                print(f"    {t}: " + " ".join(ratios))


if __name__ == "__main__":
    main()
