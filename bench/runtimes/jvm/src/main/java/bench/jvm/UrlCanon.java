package bench.jvm;

import java.net.URI;
import java.net.URISyntaxException;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.Locale;

/**
 * A plain URL normalization, the one a team would write in an afternoon with java.net.URI: RFC 3986
 * section 5.2 (a relative link resolved against the page it was found on), 6.2.2 (scheme and host
 * lower-cased, percent-escapes of unreserved characters decoded and the others' hex upper-cased,
 * dot segments removed) and 6.2.3 (the scheme's default port dropped, an empty path made "/"), and
 * the fragment dropped. Only http and https.
 *
 * <p>It is not the project's canonicalizer (docs/canonicalization.md): no WHATWG parsing (spaces,
 * backslashes, non-ASCII are refused by java.net.URI here), no IDNA, no IPv4 forms, no query or
 * tracking-parameter rules, no per-crawl fingerprint. The benchmark's frontier only varies URLs in
 * the ways this undoes, so both produce the same distinct set on it.
 */
public final class UrlCanon {
    private UrlCanon() {}

    /** A canonical URL and its host; null when the URL is not an http(s) URL java.net.URI accepts. */
    public record Canonical(String url, String host) {}

    public static Canonical canonicalize(String raw, String base) {
        try {
            URI uri = new URI(raw.strip());
            if (!uri.isAbsolute()) {
                if (base == null) {
                    return null;
                }
                uri = new URI(base.strip()).resolve(uri);
            }
            uri = uri.normalize();
            String scheme = uri.getScheme().toLowerCase(Locale.ROOT);
            String host = uri.getHost();
            if (!(scheme.equals("http") || scheme.equals("https")) || host == null) {
                return null;
            }
            host = host.toLowerCase(Locale.ROOT);
            int port = uri.getPort();
            boolean defaultPort = port == (scheme.equals("http") ? 80 : 443);
            String path = uri.getRawPath() == null || uri.getRawPath().isEmpty() ? "/" : uri.getRawPath();
            StringBuilder out = new StringBuilder(raw.length() + 8).append(scheme).append("://");
            if (uri.getRawUserInfo() != null) {
                out.append(uri.getRawUserInfo()).append('@');
            }
            out.append(host);
            if (port != -1 && !defaultPort) {
                out.append(':').append(port);
            }
            out.append(escapes(path));
            if (uri.getRawQuery() != null) {
                out.append('?').append(escapes(uri.getRawQuery()));
            }
            return new Canonical(out.toString(), host);
        } catch (URISyntaxException | IllegalArgumentException e) {
            return null;
        }
    }

    /** %XX of an unreserved character decoded, any other %xx upper-cased (RFC 3986 6.2.2.1-2). */
    static String escapes(String text) {
        if (text.indexOf('%') < 0) {
            return text;
        }
        StringBuilder out = new StringBuilder(text.length());
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            if (c == '%' && i + 2 < text.length()) {
                int value = Integer.parseInt(text.substring(i + 1, i + 3), 16);
                if (value < 128 && (Character.isLetterOrDigit(value) || "-._~".indexOf(value) >= 0)) {
                    out.append((char) value);
                } else {
                    out.append('%').append(text.substring(i + 1, i + 3).toUpperCase(Locale.ROOT));
                }
                i += 2;
            } else {
                out.append(c);
            }
        }
        return out.toString();
    }

    /** 128 bits of SHA-256 over the canonical URL: the seen-set's key. */
    public static byte[] fingerprint(String canonical) {
        try {
            byte[] digest = MessageDigest.getInstance("SHA-256").digest(canonical.getBytes(StandardCharsets.UTF_8));
            byte[] out = new byte[16];
            System.arraycopy(digest, 0, out, 0, 16);
            return out;
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }
}
