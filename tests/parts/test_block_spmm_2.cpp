// The second translation unit of test_block_spmm: the (T, Index) pairs other than
// (float, int32) (tests/test_block_spmm.cpp says which).
#define SPRIG_TEST_PART 2
#include "../test_block_spmm.cpp"
