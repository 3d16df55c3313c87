# The PyTorch oracle checked on its own, without our compiler: parameter
# counts, autograd against finite differences in f64, the rope, attention
# and file-format conventions, and oracle.py and compare.py end to end.
# Debian's python3-torch is a package of the system python, so the test runs
# /usr/bin/python3 rather than whatever python3 is first on PATH; without
# torch it exits 77 and counts as skipped.
add_test(NAME oracle_selftest COMMAND /usr/bin/python3 ${TESTS_DIR}/oracle/selftest.py)
set_tests_properties(oracle_selftest PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600 LABELS oracle)
