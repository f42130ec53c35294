#!/bin/bash
name=$1
k0=$(pgrep -x ksoftirqd/0); k1=$(pgrep -x ksoftirqd/1)
a0=$(awk '{print $14+$15}' /proc/$k0/stat); a1=$(awk '{print $14+$15}' /proc/$k1/stat)
./run.sh $name
b0=$(awk '{print $14+$15}' /proc/$k0/stat); b1=$(awk '{print $14+$15}' /proc/$k1/stat)
echo "  ksoftirqd/0 ticks=$((b0-a0)) ksoftirqd/1 ticks=$((b1-a1))"
