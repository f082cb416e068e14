/* The settings of Aiven's S3 sink 2.15.0 (S3SinkConfig) that the tests use: same names, defaults
 * and getters (gzip when no compression is set; key and value take the value encoding). */
package topicvault.harness;

import java.time.ZoneOffset;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.stream.Collectors;

import org.apache.kafka.common.config.ConfigDef;

import io.aiven.kafka.connect.common.config.AivenCommonConfig;
import io.aiven.kafka.connect.common.config.CompressionType;
import io.aiven.kafka.connect.common.config.OutputField;
import io.aiven.kafka.connect.common.config.OutputFieldEncodingType;
import io.aiven.kafka.connect.common.config.OutputFieldType;
import io.aiven.kafka.connect.common.config.TimestampSource;
import io.aiven.kafka.connect.common.config.validators.FileCompressionTypeValidator;
import io.aiven.kafka.connect.common.config.validators.FilenameTemplateValidator;
import io.aiven.kafka.connect.common.config.validators.TimeZoneValidator;
import io.aiven.kafka.connect.common.config.validators.TimestampSourceValidator;

public final class AivenS3SinkConfig extends AivenCommonConfig {
    static final String ACCESS_KEY_ID = "aws.access.key.id";
    static final String SECRET_ACCESS_KEY = "aws.secret.access.key";
    static final String BUCKET = "aws.s3.bucket.name";
    static final String ENDPOINT = "aws.s3.endpoint";
    static final String REGION = "aws.s3.region";
    /** Test-only, not a 2.15.0 setting: while this file exists, the task holds after writing a
     * flush's objects, before the worker commits their offsets, so a test can kill the worker there. */
    static final String HOLD_AFTER_FLUSH_FILE = "topicvault.harness.hold.after.flush.file";

    public AivenS3SinkConfig(final Map<String, String> props) {
        super(configDef(), props);
    }

    public static ConfigDef configDef() {
        final ConfigDef def = new ConfigDef();
        def.define(ACCESS_KEY_ID, ConfigDef.Type.PASSWORD, ConfigDef.NO_DEFAULT_VALUE, ConfigDef.Importance.HIGH, "");
        def.define(SECRET_ACCESS_KEY, ConfigDef.Type.PASSWORD, ConfigDef.NO_DEFAULT_VALUE, ConfigDef.Importance.HIGH, "");
        def.define(BUCKET, ConfigDef.Type.STRING, ConfigDef.NO_DEFAULT_VALUE, ConfigDef.Importance.HIGH, "");
        def.define(ENDPOINT, ConfigDef.Type.STRING, null, ConfigDef.Importance.LOW, "");
        def.define(REGION, ConfigDef.Type.STRING, "us-east-1", ConfigDef.Importance.MEDIUM, "");
        def.define(HOLD_AFTER_FLUSH_FILE, ConfigDef.Type.STRING, "", ConfigDef.Importance.LOW, "");
        def.define(FILE_NAME_TEMPLATE_CONFIG, ConfigDef.Type.STRING, null,
            new FilenameTemplateValidator(FILE_NAME_TEMPLATE_CONFIG), ConfigDef.Importance.MEDIUM, "");
        def.define(FILE_COMPRESSION_TYPE_CONFIG, ConfigDef.Type.STRING, null, new FileCompressionTypeValidator(),
            ConfigDef.Importance.MEDIUM, "");
        def.define(FILE_MAX_RECORDS, ConfigDef.Type.INT, 0, ConfigDef.Range.atLeast(0), ConfigDef.Importance.MEDIUM, "");
        def.define(FILE_NAME_TIMESTAMP_TIMEZONE, ConfigDef.Type.STRING, ZoneOffset.UTC.toString(),
            new TimeZoneValidator(), ConfigDef.Importance.LOW, "");
        def.define(FILE_NAME_TIMESTAMP_SOURCE, ConfigDef.Type.STRING, TimestampSource.Type.WALLCLOCK.name(),
            new TimestampSourceValidator(), ConfigDef.Importance.LOW, "");
        addOutputFieldsFormatConfigGroup(def, null);
        addKafkaBackoffPolicy(def);
        return def;
    }

    /** 2.15.0: gzip unless file.compression.type says otherwise. */
    @Override
    public CompressionType getCompressionType() {
        final String name = getString(FILE_COMPRESSION_TYPE_CONFIG);
        return Objects.nonNull(name) ? CompressionType.forName(name) : CompressionType.GZIP;
    }

    /** 2.15.0: the value only, base64, unless format.output.fields says; key and value take the value encoding. */
    @Override
    public List<OutputField> getOutputFields() {
        if (Objects.isNull(getList(FORMAT_OUTPUT_FIELDS_CONFIG))) {
            return List.of(new OutputField(OutputFieldType.VALUE, OutputFieldEncodingType.BASE64));
        }
        return getList(FORMAT_OUTPUT_FIELDS_CONFIG).stream().map(name -> {
            final OutputFieldType type = OutputFieldType.forName(name);
            final OutputFieldEncodingType encoding = type == OutputFieldType.KEY || type == OutputFieldType.VALUE
                ? getOutputFieldEncodingType() : OutputFieldEncodingType.NONE;
            return new OutputField(type, encoding);
        }).collect(Collectors.toUnmodifiableList());
    }

    @Override
    public OutputFieldEncodingType getOutputFieldEncodingType() {
        final String name = getString(FORMAT_OUTPUT_FIELDS_VALUE_ENCODING_CONFIG);
        return Objects.nonNull(name) ? OutputFieldEncodingType.forName(name) : OutputFieldEncodingType.BASE64;
    }
}
