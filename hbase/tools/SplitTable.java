// scripts/hbase split TABLE: ask the master to split every region of a table in two (HBase's
// Admin.split: the region flushes, the region server picks the middle row of its files) and
// wait until the table has more regions than before, every one of them open.
// Run with java's single-file source launcher on the cluster's classpath and configuration
// directory (no build step): java -cp CONF:CLASSPATH hbase/tools/SplitTable.java TABLE
import java.util.List;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hbase.HBaseConfiguration;
import org.apache.hadoop.hbase.HRegionLocation;
import org.apache.hadoop.hbase.TableName;
import org.apache.hadoop.hbase.client.Admin;
import org.apache.hadoop.hbase.client.Connection;
import org.apache.hadoop.hbase.client.ConnectionFactory;
import org.apache.hadoop.hbase.client.RegionLocator;

public class SplitTable {
  public static void main(String[] args) throws Exception {
    if (args.length != 1) {
      System.err.println("usage: SplitTable TABLE");
      System.exit(2);
    }
    TableName table = TableName.valueOf(args[0]);
    Configuration conf = HBaseConfiguration.create();
    long timeoutMs = Long.parseLong(System.getProperty("split.timeout.ms", "120000"));
    try (Connection connection = ConnectionFactory.createConnection(conf);
        Admin admin = connection.getAdmin();
        RegionLocator locator = connection.getRegionLocator(table)) {
      int before = admin.getRegions(table).size();
      long began = System.currentTimeMillis();
      admin.split(table);
      while (true) {
        List<HRegionLocation> now = locator.getAllRegionLocations();
        locator.clearRegionLocationCache();
        boolean open = true;
        for (HRegionLocation location : now) {
          open &= location != null && location.getServerName() != null;
        }
        if (now.size() > before && open && admin.isTableAvailable(table)) {
          StringBuilder where = new StringBuilder();
          for (HRegionLocation location : now) {
            where.append(' ').append(location.getPort());
          }
          System.out.println(
              "split " + table + ": " + before + " -> " + now.size() + " regions in "
                  + (System.currentTimeMillis() - began) + " ms; region servers" + where);
          return;
        }
        if (System.currentTimeMillis() - began > timeoutMs) {
          System.err.println("split " + table + ": still " + now.size() + " regions after "
              + timeoutMs + " ms");
          System.exit(1);
        }
        Thread.sleep(200);
      }
    }
  }
}
