# Runs a command and checks its exit status and what it prints (stdout and stderr together):
# -DCMD="exe;arg;..." -DEXIT=<status> [-DMATCH=<regex>] [-DNO_MATCH=<regex>]
execute_process(COMMAND ${CMD} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
set(all "${out}${err}")
message("${all}")
if(NOT rc STREQUAL "${EXIT}")
  message(FATAL_ERROR "exit status ${rc}, expected ${EXIT}")
endif()
if(DEFINED MATCH AND NOT all MATCHES "${MATCH}")
  message(FATAL_ERROR "the output does not match \"${MATCH}\"")
endif()
if(DEFINED NO_MATCH AND all MATCHES "${NO_MATCH}")
  message(FATAL_ERROR "the output matches \"${NO_MATCH}\"")
endif()
