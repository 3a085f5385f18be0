// The JAAS entry rules of the Java client (JaasConfig, JaasContext) over the JDK's own
// StreamTokenizer: the oracle of tests/engine/test_jaas.py. Reads hex-encoded UTF-16
// texts, one a line; prints "OK <module> <name>:<value>..." (hex, names sorted) or "ERR ...".
// One departure, kctl's: an option without a name (Java keeps it under a null key) is an ERR.
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.util.*;

public class JaasOracle {
    static String hex(String s) {
        StringBuilder b = new StringBuilder();
        for (char c : s.toCharArray()) b.append(String.format("%04x", (int) c));
        return b.toString();
    }
    static String unhex(String h) {
        StringBuilder b = new StringBuilder();
        for (int i = 0; i < h.length(); i += 4) b.append((char) Integer.parseInt(h.substring(i, i + 4), 16));
        return b.toString();
    }
    static String parse(String text) throws IOException {
        StreamTokenizer t = new StreamTokenizer(new StringReader(text));
        t.resetSyntax();
        t.wordChars(32, 128);
        t.wordChars(128 + 32, 255);
        t.ordinaryChar(';');
        t.ordinaryChar('=');
        t.whitespaceChars(0, ' ');
        t.commentChar('/');
        t.quoteChar('"');
        t.quoteChar('\'');
        t.slashSlashComments(true);
        t.slashStarComments(true);
        List<String> entries = new ArrayList<>();
        while (t.nextToken() != StreamTokenizer.TT_EOF) {
            String module = t.sval;
            if (t.nextToken() == StreamTokenizer.TT_EOF) return "ERR noflag";
            String flag = t.sval;
            if (flag == null) return "ERR flag";
            String f = flag.toUpperCase(Locale.ROOT);
            if (!(f.equals("REQUIRED") || f.equals("REQUISITE") || f.equals("SUFFICIENT") || f.equals("OPTIONAL"))) return "ERR flag";
            TreeMap<String, String> opts = new TreeMap<>();
            boolean nullKey = false;
            while (t.nextToken() != StreamTokenizer.TT_EOF && t.ttype != ';') {
                String key = t.sval;
                if (t.nextToken() != '=' || t.nextToken() == StreamTokenizer.TT_EOF || t.sval == null) return "ERR value";
                if (key == null) nullKey = true; else opts.put(key, t.sval);
            }
            if (t.ttype != ';') return "ERR semi";
            if (nullKey) return "ERR nullkey";
            if (module == null || module.isEmpty()) return "ERR module";
            StringBuilder b = new StringBuilder(hex(module));
            for (Map.Entry<String, String> e : opts.entrySet()) b.append(" ").append(hex(e.getKey())).append(":").append(hex(e.getValue()));
            entries.add(b.toString());
        }
        if (entries.size() != 1) return "ERR count" + entries.size();
        return "OK " + entries.get(0);
    }
    public static void main(String[] a) throws IOException {
        BufferedReader r = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = r.readLine()) != null) System.out.println(parse(unhex(line.trim())));
    }
}
