# Standalone HBase (master, region server and ZooKeeper in one JVM) with its Thrift1
# gateway on 0.0.0.0:9090, from the same jars and script the test suite uses.
FROM maven:3.9-eclipse-temurin-17
WORKDIR /opt/tsd
COPY hbase ./hbase
COPY scripts/hbase ./scripts/hbase
COPY docker/hbase-entrypoint.sh ./docker/hbase-entrypoint.sh
RUN scripts/hbase classpath
ENV TSD_HBASE_VAR=/var/lib/hbase TSD_HBASE_THRIFT_BIND=0.0.0.0 TSD_HBASE_HEAP=1g
VOLUME /var/lib/hbase
EXPOSE 9090
# PID 1 stops HBase cleanly on SIGTERM (give it time: docker run --stop-timeout 60).
STOPSIGNAL SIGTERM
CMD ["docker/hbase-entrypoint.sh"]
