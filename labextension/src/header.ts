/**
 * The `%%dlprof` cell header: built from the extension's settings, added or removed.
 * Pure string functions (no JupyterLab import) so they are unit-tested without a browser.
 */

/** Options of the header, from the extension's settings. */
export interface IHeaderOptions {
  /** `--key_node`: the op marking each iteration ('' lets jlprof pick). */
  keyNode: string;
  /** `--reports`: comma list of reports ('' keeps jlprof's default). */
  reports: string;
  /** `--output_path`: where reports go ('' gives each run its own jlprof_runs/ folder). */
  outputPath: string;
  /** More DLProf options, passed as typed (e.g. `--iter_start=2`). */
  extraOptions: string;
}

export const DEFAULT_HEADER_OPTIONS: IHeaderOptions = {
  keyNode: '',
  reports: '',
  outputPath: '',
  extraOptions: ''
};

const HEADER_RE = /^[ \t]*%%dlprof\b[^\n]*(\n|$)/;

/** Quote an argument the way the magic splits its line (shlex, POSIX rules). */
export function quoteArg(value: string): string {
  if (value !== '' && /^[A-Za-z0-9_@%+=:,./-]+$/.test(value)) {
    return value;
  }
  return "'" + value.replace(/'/g, "'\"'\"'") + "'";
}

/** The `%%dlprof ...` line for `options` (no trailing newline). */
export function buildHeader(options: Partial<IHeaderOptions> = {}): string {
  const o = { ...DEFAULT_HEADER_OPTIONS, ...options };
  const parts = ['%%dlprof'];
  if (o.keyNode.trim()) {
    parts.push(`--key_node=${quoteArg(o.keyNode.trim())}`);
  }
  if (o.reports.trim()) {
    parts.push(`--reports=${quoteArg(o.reports.replace(/\s+/g, ''))}`);
  }
  if (o.outputPath.trim()) {
    parts.push(`--output_path=${quoteArg(o.outputPath.trim())}`);
  }
  if (o.extraOptions.trim()) {
    parts.push(o.extraOptions.trim());
  }
  return parts.join(' ');
}

/** Whether the cell source starts with a `%%dlprof` line (leading blank lines allowed). */
export function hasHeader(source: string): boolean {
  return HEADER_RE.test(source.replace(/^(\s*\n)*/, ''));
}

/** `source` without its `%%dlprof` line (unchanged when there is none). */
export function removeHeader(source: string): string {
  const body = source.replace(/^(\s*\n)*/, '');
  return HEADER_RE.test(body) ? body.replace(HEADER_RE, '') : source;
}

/** `source` with a `%%dlprof` line on top (kept as it is when already there). */
export function addHeader(source: string, options: Partial<IHeaderOptions> = {}): string {
  if (hasHeader(source)) {
    return source;
  }
  return `${buildHeader(options)}\n${source}`;
}

/** Add the header, or remove it when the cell already has one. */
export function toggleHeader(
  source: string,
  options: Partial<IHeaderOptions> = {}
): { source: string; added: boolean } {
  if (hasHeader(source)) {
    return { source: removeHeader(source), added: false };
  }
  return { source: addHeader(source, options), added: true };
}
