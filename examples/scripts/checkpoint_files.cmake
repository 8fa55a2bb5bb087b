# What a run leaves in its checkpoint directory (EXE, arguments ARGS, directory WORK):
# --checkpoint-every 0 still writes the checkpoint at the end, and the stale temporaries a killed
# save leaves ("state.sprig.tmp." and six letters or digits) are removed at the next save, while
# files the program does not name so (another checkpoint's temporary, other lengths) are kept.
file(REMOVE_RECURSE "${WORK}")
execute_process(COMMAND "${EXE}" ${ARGS} --checkpoint "${WORK}" --checkpoint-every 0
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 60)
if(NOT rc EQUAL 0 OR NOT EXISTS "${WORK}/state.sprig")
  message(FATAL_ERROR "--checkpoint-every 0 should exit 0 and write ${WORK}/state.sprig at the end; exit ${rc}:\n${out}\n${err}")
endif()
set(stale state.sprig.tmp.a1B2c3 state.sprig.tmp.ZZZZZZ)
set(kept state.sprig.tmp.a1B2c state.sprig.tmp.a1B2c34 other.sprig.tmp.a1B2c3 state.sprig.tmp.a1-2c3 notes.txt)
foreach(f IN LISTS stale kept)
  file(WRITE "${WORK}/${f}" "left by a killed save, or not ours")
endforeach()
execute_process(COMMAND "${EXE}" ${ARGS} --checkpoint "${WORK}" --checkpoint-every 0
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 60)
if(NOT rc EQUAL 0 OR NOT out MATCHES "removed 2 stale temporary file\\(s\\) of an interrupted save")
  message(FATAL_ERROR "the second run should exit 0 and remove 2 stale temporaries; exit ${rc}:\n${out}\n${err}")
endif()
foreach(f IN LISTS stale)
  if(EXISTS "${WORK}/${f}")
    message(FATAL_ERROR "${f} is still there")
  endif()
endforeach()
foreach(f IN LISTS kept)
  if(NOT EXISTS "${WORK}/${f}")
    message(FATAL_ERROR "${f} was removed, but the program does not name it so")
  endif()
endforeach()
