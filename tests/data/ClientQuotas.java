import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;

/** Set (or with "-" remove) client quotas by client.id, wait until the cluster describes them, print them:
 *  java -cp 'JARS/*' ClientQuotas.java BOOTSTRAP CLIENT_ID/producer_byte_rate=N OTHER_ID/consumer_byte_rate=- ... */
public class ClientQuotas {
    public static void main(String[] args) throws Exception {
        Properties config = new Properties();
        config.put("bootstrap.servers", args[0]);
        Map<ClientQuotaEntity, List<ClientQuotaAlteration.Op>> wanted = new HashMap<>();
        for (int i = 1; i < args.length; i++) {
            String[] client = args[i].split("/", 2);
            String[] pair = client[1].split("=", 2);
            ClientQuotaEntity entity = new ClientQuotaEntity(Map.of(ClientQuotaEntity.CLIENT_ID, client[0]));
            wanted.computeIfAbsent(entity, e -> new ArrayList<>())
                .add(new ClientQuotaAlteration.Op(pair[0], pair[1].equals("-") ? null : Double.valueOf(pair[1])));
        }
        List<ClientQuotaAlteration> alterations = new ArrayList<>();
        wanted.forEach((entity, ops) -> alterations.add(new ClientQuotaAlteration(entity, ops)));
        try (Admin admin = Admin.create(config)) {
            admin.alterClientQuotas(alterations).all().get();
            // The brokers learn the change from the metadata log a moment later: wait until described.
            Map<ClientQuotaEntity, Map<String, Double>> described = Map.of();
            for (int attempt = 0; attempt < 100; attempt++) {
                described = admin.describeClientQuotas(ClientQuotaFilter.all()).entities().get();
                if (applied(described, wanted)) {
                    break;
                }
                Thread.sleep(100);
            }
            System.out.println(described);
        }
    }

    static boolean applied(Map<ClientQuotaEntity, Map<String, Double>> described,
                           Map<ClientQuotaEntity, List<ClientQuotaAlteration.Op>> wanted) {
        return wanted.entrySet().stream().allMatch(w -> w.getValue().stream().allMatch(
            op -> Objects.equals(described.getOrDefault(w.getKey(), Map.of()).get(op.key()), op.value())));
    }
}
