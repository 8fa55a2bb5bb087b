# gnuplot -e "datafile='block_sweep.dat'; outfile='block_sweep.png'; sparsities='0.9 0.95'" block_sweep.gp
# Test accuracy against ms per step, one labelled point per run (shape, sparsity, seed).
if (!exists("sparsities")) sparsities = "0.9 0.95"
set terminal pngcairo size 1000,620 font ",10"
set output outfile
set title "Fashion-MNIST MLP: hidden layers unstructured or in RxC blocks (fixed topology, 1 thread)"
set xlabel "ms per training step"
set ylabel "test accuracy (%)"
set grid
set key bottom right title "sparsity"
plot for [i=1:words(sparsities)] datafile using 5:(strcol(2) eq word(sparsities, i) ? 100*$4 : 1/0):1 \
     with labels offset char 0,0.7 font ",8" textcolor lt i point pointtype (i == 1 ? 7 : 5) linecolor i \
     title word(sparsities, i)
