set terminal pngcairo size 1260,380 noenhanced
set output "examples/results/dst/dst_compare.png"
set multiplot layout 1,3
set grid
set key bottom right
set xlabel 'epoch'
set ylabel 'test accuracy (%)'
set title 'sparsity 90%'
plot "examples/results/dst/dst_compare_curves.dat" index 0 with linespoints title 'static', "examples/results/dst/dst_compare_curves.dat" index 1 with linespoints title 'set', "examples/results/dst/dst_compare_curves.dat" index 2 with linespoints title 'rigl', "examples/results/dst/dst_compare_curves.dat" index 3 with linespoints title 'snfs'
set title 'sparsity 95%'
plot "examples/results/dst/dst_compare_curves.dat" index 4 with linespoints title 'static', "examples/results/dst/dst_compare_curves.dat" index 5 with linespoints title 'set', "examples/results/dst/dst_compare_curves.dat" index 6 with linespoints title 'rigl', "examples/results/dst/dst_compare_curves.dat" index 7 with linespoints title 'snfs'
set title 'sparsity 98%'
plot "examples/results/dst/dst_compare_curves.dat" index 8 with linespoints title 'static', "examples/results/dst/dst_compare_curves.dat" index 9 with linespoints title 'set', "examples/results/dst/dst_compare_curves.dat" index 10 with linespoints title 'rigl', "examples/results/dst/dst_compare_curves.dat" index 11 with linespoints title 'snfs'
unset multiplot
