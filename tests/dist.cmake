# The MPI build of the dist tests (tests/test_dist_data_parallel.cpp on MpiCommunicator),
# run under mpirun with 2 and 3 ranks, oversubscribed, one OpenMP thread each. Defined only
# when sprig::dist exists (MPI found) and the launcher is Open MPI's (--oversubscribe).
if(TARGET sprig_dist AND TARGET test_dist_data_parallel AND MPIEXEC_EXECUTABLE)
  add_executable(test_dist_data_parallel_mpi ${CMAKE_CURRENT_SOURCE_DIR}/test_dist_data_parallel.cpp
                 ${CMAKE_CURRENT_SOURCE_DIR}/dist/mpi_main.cpp)
  target_compile_definitions(test_dist_data_parallel_mpi PRIVATE SPRIG_TEST_MPI=1)
  target_link_libraries(test_dist_data_parallel_mpi PRIVATE sprig::dist sprig_dev_flags Catch2::Catch2)
  sprig_test_at_og(test_dist_data_parallel_mpi)
  foreach(ranks IN ITEMS 2 3)
    add_test(NAME test_dist_data_parallel_mpi:np${ranks}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${ranks} --oversubscribe ${MPIEXEC_PREFLAGS}
                     $<TARGET_FILE:test_dist_data_parallel_mpi> ${MPIEXEC_POSTFLAGS})
    # root: Open MPI refuses it unless told (the CI runs as root)
    set_tests_properties(test_dist_data_parallel_mpi:np${ranks} PROPERTIES TIMEOUT 300 LABELS mpi
      ENVIRONMENT "OMP_NUM_THREADS=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
  endforeach()
endif()
