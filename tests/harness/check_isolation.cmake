# Runs gdn-ops with a planted fault (GDN_OPS_FAULT, see gdn_ops_faults.cpp) and checks that the
# faulty case is the one failed case, with the expected cause, that cases after it still ran
# and passed, and that the run closes with "N passed, 1 failed" and exit status 1.
# -DEXE=... -DFAULT=KIND:BACKEND:REGEX -DARGS="test;-b;CPU;-p;fd" -DNOTE=<regex of the failure note>
execute_process(COMMAND ${CMAKE_COMMAND} -E env "GDN_OPS_FAULT=${FAULT}" ${EXE} ${ARGS}
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
message("${out}")
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "exit status ${rc}, expected 1\n${err}")
endif()
string(REGEX MATCHALL "[^\n]*: FAIL \\[[A-Z0-9]+\\][^\n]*" fails "${out}")
list(LENGTH fails n_fail)
if(NOT n_fail EQUAL 1)
  message(FATAL_ERROR "${n_fail} failed cases, expected exactly the planted one")
endif()
if(NOT fails MATCHES "${NOTE}")
  message(FATAL_ERROR "the failed case does not say \"${NOTE}\": ${fails}")
endif()
string(REGEX MATCHALL "[^\n]*: OK \\[[A-Z0-9]+\\]" oks "${out}")
list(LENGTH oks n_ok)
string(FIND "${out}" "${fails}" at_fail)
string(FIND "${out}" ": OK [" at_last_ok REVERSE)
if(n_ok EQUAL 0 OR at_last_ok LESS at_fail)
  message(FATAL_ERROR "no case passed after the failed one: the run did not go on")
endif()
if(NOT out MATCHES "\n${n_ok} passed, 1 failed\n$")
  message(FATAL_ERROR "the closing line is not \"${n_ok} passed, 1 failed\"")
endif()
