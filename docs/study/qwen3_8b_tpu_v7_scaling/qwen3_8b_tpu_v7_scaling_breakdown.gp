set terminal pngcairo noenhanced size 1080,640 font 'sans,10'
set output "docs/study/qwen3_8b_tpu_v7_scaling/qwen3_8b_tpu_v7_scaling_breakdown.png"
set title "qwen3_8b_tpu_v7_scaling: step time breakdown (simulated)"
set ylabel 'share of step time (%)'
set yrange [0:100]
set style data histograms
set style histogram rowstacked
set style fill solid 0.85 border -1
set boxwidth 0.8
set xtics rotate by -60 font 'sans,8'
set key outside right
plot for [i=2:7] "docs/study/qwen3_8b_tpu_v7_scaling/qwen3_8b_tpu_v7_scaling_breakdown.dat" using i:xtic(1) title columnheader(i)
