#!/usr/bin/env python3
"""CPU seconds per test, for finding what makes `make test` slow on a
machine whose wall-clock times mean nothing (shared cores).

Runs the tests of the default set (labels long and full left out) one at
a time, as ctest would (command, working folder, environment, fixtures'
set-up tests first), and prints one line per test:

  NAME  CPU_S  WALL_S  EXIT  L

CPU_S is user + system time of the test and of every process it waited
for (mpirun's ranks included); L marks the tests that hold the lock
`mpirun` (or run serially), whose sum is the serial chain of ctest -j2.

  ctest --test-dir build --show-only=json-v1 > tests.json
  cd build/tests && python3 ../../tests/common/cpu_times.py ../../tests.json [REGEX] [--mpirun-only]

Logs go to ./cpu-times-logs/NAME.log."""
import json
import os
import re
import resource
import subprocess
import sys
import time


def props_of(t):
    return {p['name']: p['value'] for p in t.get('properties', [])}


def main():
    tests = json.load(open(sys.argv[1]))['tests']
    args = [a for a in sys.argv[2:] if not a.startswith('--')]
    keep = re.compile(args[0] if args else '.')
    mpirun_only = '--mpirun-only' in sys.argv
    setups = {}
    for t in tests:
        for f in props_of(t).get('FIXTURES_SETUP', []):
            setups.setdefault(f, []).append(t)
    os.makedirs('cpu-times-logs', exist_ok=True)
    done = set()
    totals = {'all': 0.0, 'chain': 0.0}

    def run(t):
        if t['name'] in done:
            return
        props = props_of(t)
        for f in props.get('FIXTURES_REQUIRED', []):
            for s in setups.get(f, []):
                run(s)
        done.add(t['name'])
        env = dict(os.environ)
        for e in props.get('ENVIRONMENT', []):
            k, v = e.split('=', 1)
            env[k] = v
        log = open('cpu-times-logs/' + t['name'].replace('/', '_') + '.log', 'w')
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.time()
        try:
            rc = subprocess.run(t['command'], cwd=props.get('WORKING_DIRECTORY', os.getcwd()),
                                env=env, stdout=log, stderr=subprocess.STDOUT,
                                timeout=props.get('TIMEOUT', 1500)).returncode
        except subprocess.TimeoutExpired:
            rc = 'timeout'
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        locked = 'mpirun' in props.get('RESOURCE_LOCK', []) or bool(props.get('RUN_SERIAL'))
        totals['all'] += cpu
        if locked:
            totals['chain'] += cpu
        print(f"{t['name']}\t{cpu:.2f}\t{time.time() - t0:.1f}\t{rc}\t{'L' if locked else '-'}",
              flush=True)

    for t in tests:
        props = props_of(t)
        if set(props.get('LABELS', [])) & {'long', 'full'} or not keep.search(t['name']):
            continue
        locked = 'mpirun' in props.get('RESOURCE_LOCK', []) or props.get('RUN_SERIAL')
        if mpirun_only and not locked:
            continue
        run(t)
    print(f"total\t{totals['all']:.2f}\tchain (mpirun lock)\t{totals['chain']:.2f}")


main()
