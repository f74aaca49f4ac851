#!/usr/bin/env python3
"""Times the same agentgate command with two or more binaries, interleaved.

On a shared machine the load moves from minute to minute; running each binary in turn,
round after round, lets that noise fall on every binary alike, so the medians can be
compared even where the absolute figures cannot. Each binary gets an AGENTGATE_HOME of
its own (kept across its rounds, so after the first round its home is warm): binaries
of different versions must not share a registry or caches.

    bench/compare_binaries.py [--rounds N] -- ARGS... -- BIN [BIN...]

    e.g. bench/compare_binaries.py --rounds 60 -- run --json task.yaml -- old/agentgate new/agentgate

Every run must exit 0. Prints each binary's median, and its difference from the first.
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time


def main(argv):
    rounds = 40
    if argv[:1] == ["--rounds"]:
        rounds, argv = int(argv[1]), argv[2:]
    if argv[:1] != ["--"] or argv[1:].count("--") != 1:
        sys.exit(__doc__)
    split = argv.index("--", 1)
    args, binaries = argv[1:split], argv[split + 1:]
    if not binaries:
        sys.exit(__doc__)
    with tempfile.TemporaryDirectory() as work:
        homes = {b: os.path.join(work, f"home-{i}") for i, b in enumerate(binaries)}
        times = {b: [] for b in binaries}
        for _ in range(rounds):
            for binary in binaries:
                env = dict(os.environ, AGENTGATE_HOME=homes[binary])
                started = time.perf_counter()
                done = subprocess.run([binary, *args], env=env, capture_output=True)
                times[binary].append((time.perf_counter() - started) * 1000)
                if done.returncode != 0:
                    sys.exit(f"{binary} {' '.join(args)} exited {done.returncode}:\n"
                             f"{done.stderr.decode(errors='replace')}")
    first = statistics.median(times[binaries[0]])
    print(f"{rounds} rounds of: {' '.join(args)}")
    for binary in binaries:
        median = statistics.median(times[binary])
        print(f"{median:8.2f} ms  {median - first:+7.2f}  {binary}")


if __name__ == "__main__":
    main(sys.argv[1:])
