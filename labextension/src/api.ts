/** Calls to the jlprof server extension (authenticated like every Jupyter API call). */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { IProfileEntry, IProfilePage } from './format';

async function get<T>(endpoint: string, query: Record<string, string | number>): Promise<T> {
  const settings = ServerConnection.makeSettings();
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) {
    params.set(k, String(v));
  }
  const url = URLExt.join(settings.baseUrl, 'jlprof', endpoint) + '?' + params.toString();
  const response = await ServerConnection.makeRequest(url, {}, settings);
  const text = await response.text();
  let data: any = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = text;
  }
  if (!response.ok) {
    const message = (data && data.message) || response.statusText || `HTTP ${response.status}`;
    throw new Error(message);
  }
  return data as T;
}

/** One page of the profiles under `path` (root-relative folder), newest first. */
export function listProfiles(path = '', offset = 0, limit = 50): Promise<IProfilePage> {
  return get<IProfilePage>('profiles', { path, offset, limit });
}

/** The entry of one file or folder (for the file browser's 'Open in jlprof'). */
export function describeProfile(path: string): Promise<IProfileEntry> {
  return get<IProfileEntry>('profile', { path });
}
