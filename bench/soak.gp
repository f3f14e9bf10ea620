# SPDX-License-Identifier: Apache-2.0
# bench/soak.gp: bench/soak.sh's rows as one PNG, three panels against the
# minute (each fault minute labelled with its fault): RSS of each daemon,
# p99 (the whole minute, and outside its fault window), requests.
#   gnuplot -e "datafile='soak.tsv'; outfile='soak.png'; title_note='...'" bench/soak.gp
# soak.tsv columns (bench/soak.py's COLUMNS): minute fault rss_a_kib fds_a
# rss_b_kib fds_b requests allowed denied degraded failed_in_window
# failed_outside p50_ms p99_ms p99_steady_ms over
if (!exists("datafile")) { datafile = 'soak.tsv' }
if (!exists("outfile")) { outfile = 'soak.png' }
if (!exists("title_note")) { title_note = '' }

# A long run's labels need the width: one per minute, upright.
stats datafile using 1 nooutput
long = STATS_records > 20
set terminal pngcairo noenhanced size (long ? 1700 : 1100),(long ? 1000 : 900) font ',10'
set output outfile
set datafile separator '\t'
set multiplot layout 3,1 title 'bench/soak.sh: 2 daemons, one Redis, a fault a minute'.(title_note eq '' ? '' : "\n".title_note)
set grid
set key outside right top
if (long) { set xtics rotate by 90 right font ',8' } else { set xtics rotate by 30 right }
set xrange [-0.5:*]
set offsets 0,0.5,0,0
set boxwidth 0.8
set lmargin 12
set rmargin 22

set ylabel 'RSS (KiB)'
plot datafile using 1:3:xtic(stringcolumn(1).' '.stringcolumn(2)) with linespoints title 'daemon a', \
     '' using 1:5 with linespoints title 'daemon b'

set ylabel 'p99 (ms)'
set yrange [0:*]
plot datafile using 1:14:xtic(stringcolumn(1).' '.stringcolumn(2)) with linespoints title 'p99, minute', \
     '' using 1:15 with linespoints title 'p99, outside the fault window'

set ylabel 'requests per minute'
plot datafile using 1:7:xtic(stringcolumn(1).' '.stringcolumn(2)) with boxes fill solid 0.5 title 'requests', \
     '' using 1:($11+$12) with impulses lw 3 title 'failed'
unset multiplot
