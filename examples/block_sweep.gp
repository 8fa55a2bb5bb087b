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
plot for [s in sparsities] datafile using 5:(strcol(2) eq s ? 100*$4 : 1/0):1 \
     with labels point pointtype 7 pointsize 1 offset char 0,0.7 font ",8" title s
