# conf.sh: the ramjet and h2o configurations ticks.sh and syscalls.sh were run with
# (files from bench/compare.py's /tmp/ramjet-bench/www; CONF: where to write them).
W=/tmp/ramjet-bench/www
mkdir -p ${CONF:-/tmp/nk/c}
cat > ${CONF:-/tmp/nk/c}/ramjet.toml <<E
listen = ["127.0.0.1:18080"]
workers = 1
[log]
access = "off"
[timeouts]
keepalive = "300s"
header = "300s"
[[location]]
root = "$W"
E
cat > ${CONF:-/tmp/nk/c}/h2o.conf <<E
listen:
  host: 127.0.0.1
  port: 18083
num-threads: 1
max-connections: 19000
http1-request-timeout: 300
error-log: ${CONF:-/tmp/nk/c}/h2o-error.log
hosts:
  default:
    paths:
      /:
        file.dir: $W
E
