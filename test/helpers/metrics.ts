/** Reading a proxy's metrics endpoint in tests: its URL, and /metrics parsed by a Prometheus text-format parser from npm. */
import { createRequire } from 'node:module';

/** One family as parse-prometheus-text-format (prom2json's shape) gives it. */
export interface Family {
  name: string;
  help: string;
  type: 'COUNTER' | 'GAUGE' | 'HISTOGRAM' | 'SUMMARY' | 'UNTYPED';
  metrics: {
    value?: string;
    labels?: Record<string, string>;
    buckets?: Record<string, string>;
    count?: string;
    sum?: string;
  }[];
}

const parse = createRequire(import.meta.url)('parse-prometheus-text-format') as (text: string) => Family[];

/** The URL a proxy printed as `metrics on <url>`. */
export function metricsUrl(output: string): string {
  const match = /^metrics on (\S+)$/m.exec(output);
  if (!match) throw new Error(`the proxy printed no metrics address:\n${output}`);
  return match[1]!;
}

export interface Scrape {
  text: string;
  families: Map<string, Family>;
  /** The value of `name`'s sample whose labels include `labels` (undefined: no such sample). */
  value(name: string, labels?: Record<string, string>): number | undefined;
}

/** GET /metrics, parsed. */
export async function scrape(url: string): Promise<Scrape> {
  const response = await fetch(`${url}/metrics`);
  if (response.status !== 200) throw new Error(`/metrics answered ${response.status}`);
  const text = await response.text();
  const families = new Map(parse(text).map((family) => [family.name, family]));
  return {
    text,
    families,
    value(name, labels = {}) {
      const sample = families
        .get(name)
        ?.metrics.find((metric) => Object.entries(labels).every(([key, value]) => metric.labels?.[key] === value));
      return sample?.value === undefined ? undefined : Number(sample.value);
    },
  };
}

/** Scrapes until `ready(scrape)` holds (the endpoint caches a snapshot a quarter of a second), at most `timeoutMs`. */
export async function scrapeUntil(
  url: string,
  ready: (scrape: Scrape) => boolean,
  timeoutMs = 20_000,
): Promise<Scrape> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const result = await scrape(url);
    if (ready(result)) return result;
    if (Date.now() > deadline) throw new Error(`the metrics did not reach the expected values:\n${result.text}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
