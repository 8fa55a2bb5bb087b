# dist_step: the data-parallel training step (sprig::dist::DataParallel) under mpirun, or on
# one process. Needs sprig::dist (MPI found), CLI11 and OpenMP.
find_package(CLI11 QUIET)
find_package(OpenMP QUIET COMPONENTS CXX)
if(TARGET sprig_dist AND CLI11_FOUND AND OpenMP_CXX_FOUND)
  add_executable(dist_step ${CMAKE_CURRENT_LIST_DIR}/dist_step.cpp)
  target_link_libraries(dist_step PRIVATE sprig::dist sprig_dev_flags OpenMP::OpenMP_CXX)
  if(TARGET CLI11::CLI11)
    target_link_libraries(dist_step PRIVATE CLI11::CLI11)
  endif()
  # smoke: 2 ranks, RigL updates in the timed steps, both models, the MLP's sums after
  # backward (the default) and the FFN's during it (--overlap)
  if(SPRIG_BUILD_TESTS AND MPIEXEC_EXECUTABLE)
    foreach(model_overlap IN ITEMS mlp:0 ffn:1)
      string(REPLACE ":" ";" pair ${model_overlap})
      list(GET pair 0 model)
      list(GET pair 1 overlap)
      set(overlap_flag "")
      if(overlap)
        set(overlap_flag --overlap)
      endif()
      add_test(NAME bench:dist_step_${model}_smoke
               COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 --oversubscribe ${MPIEXEC_PREFLAGS}
                       $<TARGET_FILE:dist_step> --model ${model} --width 64 --hidden 256 --batch 16 --warmup 1
                       --steps 6 --algorithm rigl --delta-t 3 ${overlap_flag})
      set_tests_properties(bench:dist_step_${model}_smoke PROPERTIES LABELS "bench;mpi"
        ENVIRONMENT "OMP_NUM_THREADS=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"
        PASS_REGULAR_EXPRESSION
          "DISTSTEP model=${model} optimizer=sgd overlap=${overlap} ranks=2 .*gather_bytes_per_update=[1-9]")
    endforeach()
  endif()
else()
  message(STATUS "sprig: dist_step skipped (needs MPI for sprig::dist, CLI11 and OpenMP)")
endif()
