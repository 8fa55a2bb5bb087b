# Plots examples/results/sweep.dat (written by sweep_sparsity.sh): test accuracy (left axis)
# and weight memory as % of dense (right axis) against sparsity.
# gnuplot -e "datafile='sweep.dat'; outfile='sweep.png'" sweep_sparsity.gp
if (!exists("datafile")) datafile = 'sweep.dat'
if (!exists("outfile")) outfile = 'sweep.png'
set terminal pngcairo size 900,540 font ",11"
set output outfile
set title "Fashion-MNIST MLP 784-1024-1024-10: sparse hidden layers"
set xlabel "sparsity of the hidden layers"
set ylabel "test accuracy (%)"
set y2label "weight memory (% of dense)"
set ytics nomirror
set y2tics
set y2range [0:*]
set xrange [-0.02:1.0]
set grid
set key bottom left
plot datafile using 1:($2*100) with linespoints lw 2 pt 7 title "test accuracy", \
     datafile using 1:($3*100/$4) axes x1y2 with linespoints lw 2 pt 5 dt 2 title "weight memory"
