# The op table in docs/language.md is generated from ir/ops.def; this test
# fails when the two drift apart (fix: python3 scripts/ops-table.py).
add_test(NAME docs.ops_table
         COMMAND python3 ${CMAKE_SOURCE_DIR}/scripts/ops-table.py --check)
