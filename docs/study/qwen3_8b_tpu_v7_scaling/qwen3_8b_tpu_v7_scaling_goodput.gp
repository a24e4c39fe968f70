set terminal pngcairo noenhanced size 960,600 font 'sans,11'
set output "docs/study/qwen3_8b_tpu_v7_scaling/qwen3_8b_tpu_v7_scaling_goodput.png"
set title "qwen3_8b_tpu_v7_scaling: goodput of the whole run (simulated step, run model)"
set xlabel "simulation.num_chips"
set ylabel "goodput (% of wall time)"
set grid
set key outside right
set yrange [0:*]
set logscale x 2
set format x '%.0f'
plot "docs/study/qwen3_8b_tpu_v7_scaling/qwen3_8b_tpu_v7_scaling_goodput.dat" index 0 using 1:2 with linespoints lw 2 title "fused", "docs/study/qwen3_8b_tpu_v7_scaling/qwen3_8b_tpu_v7_scaling_goodput.dat" index 1 using 1:2 with linespoints lw 2 title "separate"
