// Test helper for tests/test_options_properties.py: loads each file with the real
// java.util.Properties (what the DJL container uses) and prints every key and value with each
// UTF-16 code unit written as a backslash-u escape, so Python can compare them exactly.
import java.io.IOException;
import java.io.InputStream;
import java.io.Reader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.Properties;
import java.util.TreeSet;

public class PropertiesDump {
    public static void main(String[] args) throws IOException {
        for (String arg : args) {
            Properties utf8 = new Properties();
            try (Reader reader = Files.newBufferedReader(Paths.get(arg), StandardCharsets.UTF_8)) {
                utf8.load(reader);
            }
            Properties latin1 = new Properties();
            try (InputStream stream = Files.newInputStream(Paths.get(arg))) {
                latin1.load(stream);
            }
            System.out.println("FILE " + arg);
            dump("R", utf8);
            dump("S", latin1);
        }
    }

    private static void dump(String mode, Properties properties) {
        for (String key : new TreeSet<>(properties.stringPropertyNames())) {
            System.out.println(mode + " " + escape(key) + " " + escape(properties.getProperty(key)));
        }
    }

    private static String escape(String text) {
        StringBuilder out = new StringBuilder("=");
        for (char c : text.toCharArray()) {
            out.append(String.format("\\u%04x", (int) c));
        }
        return out.toString();
    }
}
