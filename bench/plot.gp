# SPDX-License-Identifier: Apache-2.0
# bench/plot.gp: the plots of bench/run.sh as PNGs.
# The connection sweep (requests per second and p99 against connections):
#   gnuplot -e "datafile='sweep.dat'; outfile='throughput.png'; has_w2=0; title_note='...'" plot.gp
# sweep.dat columns: conns rl_w1_rps rl_w1_p99 nginx_w1_rps nginx_w1_p99 rl_w2_rps rl_w2_p99
# (NaN where a point was not measured).
# The run's comparisons as throughput bars (issue 20's targets), when
# barsfile is given:
#   gnuplot -e "barsfile='bars.dat'; outfile='bars.png'; title_note='...'" plot.gp
# bars.dat: "ratelimitd case | its peer" ratelimitd_rps peer_rps (NaN: not measured).
if (!exists("title_note")) { title_note = '' }

if (exists("barsfile")) {
  if (!exists("outfile")) { outfile = 'bars.png' }
  set terminal pngcairo noenhanced size 1100,650 font ',10'
  set output outfile
  set datafile missing 'NaN'
  set title 'bench/run.sh: ratelimitd and its peer on the same load (requests per second; a missing bar was not measured)'.(title_note eq '' ? '' : "\n".title_note)
  set style data histograms
  set style histogram clustered gap 1
  set style fill solid 0.85 border -1
  set boxwidth 0.9
  set xtics rotate by 25 right nomirror
  set ylabel 'requests (checks) per second'
  set yrange [0:*]
  set format y '%.0f'
  set grid ytics
  set key outside right top
  set bmargin 10
  set lmargin 22
  set rmargin 18
  plot barsfile using 2:xtic(1) lc rgb '#8e24aa' title 'ratelimitd (left of |)', \
       '' using 3 lc rgb '#ef6c00' title 'peer (right of |)'
} else {
  if (!exists("datafile")) { datafile = 'sweep.dat' }
  if (!exists("outfile")) { outfile = 'throughput.png' }
  if (!exists("has_w2")) { has_w2 = 0 }

  set terminal pngcairo noenhanced size 1000,800 font ',10'
  set output outfile
  set datafile missing 'NaN'
  set logscale x 2
  set xlabel 'concurrent connections (wrk -t1 -c N)'
  set grid
  set key outside right top
  set multiplot layout 2,1 title 'POST /check, 100 000 random keys, fixed_window 100/60s: ratelimitd vs nginx constant 200'.(title_note eq '' ? '' : "\n".title_note)

  set ylabel 'requests per second'
  set yrange [0:*]
  set format y '%.0f'
  if (has_w2) {
    plot datafile using 1:2 with linespoints lw 2 pt 7 lc rgb '#8e24aa' title 'ratelimitd, 1 worker', \
         datafile using 1:6 with linespoints lw 2 pt 5 lc rgb '#00897b' title 'ratelimitd, 2 workers', \
         datafile using 1:4 with linespoints lw 2 pt 9 dt 2 lc rgb '#ef6c00' title 'nginx, 1 worker'
  } else {
    plot datafile using 1:2 with linespoints lw 2 pt 7 lc rgb '#8e24aa' title 'ratelimitd, 1 worker', \
         datafile using 1:4 with linespoints lw 2 pt 9 dt 2 lc rgb '#ef6c00' title 'nginx, 1 worker'
  }

  set ylabel 'p99 latency (ms)'
  set logscale y 10
  set yrange [*:*]
  set format y '%g'
  if (has_w2) {
    plot datafile using 1:3 with linespoints lw 2 pt 7 lc rgb '#8e24aa' title 'ratelimitd, 1 worker', \
         datafile using 1:7 with linespoints lw 2 pt 5 lc rgb '#00897b' title 'ratelimitd, 2 workers', \
         datafile using 1:5 with linespoints lw 2 pt 9 dt 2 lc rgb '#ef6c00' title 'nginx, 1 worker'
  } else {
    plot datafile using 1:3 with linespoints lw 2 pt 7 lc rgb '#8e24aa' title 'ratelimitd, 1 worker', \
         datafile using 1:5 with linespoints lw 2 pt 9 dt 2 lc rgb '#ef6c00' title 'nginx, 1 worker'
  }
  unset multiplot
}
