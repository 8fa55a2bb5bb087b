// fashion_mnist_runs.cpp — the runs of examples/fashion_mnist.cpp with 4x4, 8x1, 8x8 and 16x1
// blocks (fashion_mnist_run.hpp), instantiated here so that they compile beside
// fashion_mnist.cpp.
#include "fashion_mnist_run.hpp"

namespace fashion_mnist {

template int SPRIG_FASHION_MNIST_BLOCK_RUN(4, 4)(const Config&);
template int SPRIG_FASHION_MNIST_BLOCK_RUN(8, 1)(const Config&);
template int SPRIG_FASHION_MNIST_BLOCK_RUN(8, 8)(const Config&);
template int SPRIG_FASHION_MNIST_BLOCK_RUN(16, 1)(const Config&);

}  // namespace fashion_mnist
