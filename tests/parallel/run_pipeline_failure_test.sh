#!/usr/bin/env bash
# Runs pipeline_failure_test under mpirun and judges it by its output (see
# pipeline_failure_test.cpp): the job ends with MPI_Abort on purpose, so mpirun's exit status says
# nothing. Passes when every rank reports the failing stage's message and none reports a failure,
# well within the communication timeout.
# usage: run_pipeline_failure_test.sh MPIRUN NP PROGRAM
set -u
mpirun=$1 np=$2 prog=$3
out=$(timeout 40 "$mpirun" --oversubscribe -np "$np" "$prog" 2>&1)
rc=$?
echo "$out"
if [ $rc -eq 124 ]; then echo "run_pipeline_failure_test: the job hung (killed after 40 s)"; exit 1; fi
if grep -q "PIPE-FAIL-TEST rank [0-9]*: FAILED" <<<"$out"; then exit 1; fi
ok=$(grep -c "PIPE-FAIL-TEST rank [0-9]*: ok" <<<"$out")
[ "$ok" -eq "$np" ] || { echo "run_pipeline_failure_test: $ok of the $np ranks reported the failure"; exit 1; }
echo "run_pipeline_failure_test: passed"
