/**
 * jlprof for JupyterLab: a `%%dlprof` header on the active cell (toolbar, context menu,
 * palette, shortcut), a Profiles sidebar, and "Open in jlprof" for nsys files.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { Dialog, ICommandPalette, Notification, showDialog } from '@jupyterlab/apputils';
import { PathExt } from '@jupyterlab/coreutils';
import { IFileBrowserFactory } from '@jupyterlab/filebrowser';
import { INotebookTracker, NotebookActions, NotebookPanel } from '@jupyterlab/notebook';
import { Contents, ServerConnection } from '@jupyterlab/services';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { LabIcon } from '@jupyterlab/ui-components';

import { describeProfile } from './api';
import { profileCells, profileNotebookName } from './format';
import {
  DEFAULT_HEADER_OPTIONS,
  IHeaderOptions,
  addHeader,
  hasHeader,
  toggleHeader
} from './header';
import { Mode, enableInPlace, kernelState, parseMode, planProblem, planProfile } from './mode';
import { ProfilesSidebar } from './sidebar';

const PLUGIN_ID = 'jlprof:plugin';

export namespace CommandIDs {
  export const toggle = 'jlprof:toggle-header';
  export const profileRun = 'jlprof:profile-and-run';
  export const openProfile = 'jlprof:open-profile';
  export const openFile = 'jlprof:open-file';
  export const insertProfile = 'jlprof:insert-profile-cells';
  export const showProfiles = 'jlprof:show-profiles';
}

const ICON_SVG =
  '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" width="16">' +
  '<path class="jp-icon3" fill="#616161" d="M3 20h4V10H3zm7 0h4V4h-4zm7 0h4v-7h-4z"/></svg>';
export const profileIcon = new LabIcon({ name: 'jlprof:profile', svgstr: ICON_SVG });

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'Profile notebook cells with %%dlprof; browse and reopen profiles.',
  autoStart: true,
  requires: [INotebookTracker],
  optional: [ISettingRegistry, ICommandPalette, IFileBrowserFactory, ILayoutRestorer],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    settingRegistry: ISettingRegistry | null,
    palette: ICommandPalette | null,
    browserFactory: IFileBrowserFactory | null,
    restorer: ILayoutRestorer | null
  ) => {
    const { commands } = app;
    let options: IHeaderOptions = { ...DEFAULT_HEADER_OPTIONS };
    let runOnOpen = true;
    let mode: Mode = 'sidecar';

    if (settingRegistry) {
      void settingRegistry.load(PLUGIN_ID).then(
        settings => {
          const read = () => {
            const c = settings.composite as Record<string, unknown>;
            options = {
              keyNode: String(c.keyNode ?? ''),
              reports: String(c.reports ?? ''),
              outputPath: String(c.outputPath ?? ''),
              extraOptions: String(c.extraOptions ?? '')
            };
            runOnOpen = c.runOnOpen !== false;
            mode = parseMode(c.mode);
          };
          read();
          settings.changed.connect(read);
        },
        reason => console.error('jlprof: could not load settings', reason)
      );
    }

    const activeCodeCell = () => {
      const panel = tracker.currentWidget;
      const cell = tracker.activeCell;
      if (!panel || !cell || cell.model.type !== 'code') {
        return null;
      }
      return { panel, cell };
    };

    commands.addCommand(CommandIDs.toggle, {
      label: 'Toggle %%dlprof Profiling of This Cell',
      caption: 'Add or remove the %%dlprof header (options from the jlprof settings)',
      icon: args => (args.toolbar ? profileIcon : undefined),
      isEnabled: () => activeCodeCell() !== null,
      execute: async () => {
        const target = activeCodeCell();
        if (!target) {
          return;
        }
        const model = target.cell.model.sharedModel;
        const adding = !hasHeader(model.getSource());
        if (adding && mode === 'in-place' && (await prepareInPlace(target.panel)) === 'stop') {
          return;
        }
        model.setSource(toggleHeader(model.getSource(), options).source);
      }
    });

    commands.addCommand(CommandIDs.profileRun, {
      label: 'Profile and Run This Cell (%%dlprof)',
      caption: 'Add the %%dlprof header if missing, then run the cell',
      isEnabled: () => activeCodeCell() !== null,
      execute: async () => {
        const target = activeCodeCell();
        if (!target) {
          return;
        }
        const { panel } = target;
        const ready = mode === 'in-place' ? await prepareInPlace(panel) : 'ready';
        if (ready === 'stop') {
          return;
        }
        const model = target.cell.model.sharedModel;
        model.setSource(addHeader(model.getSource(), options));
        if (ready === 'ready') {
          await NotebookActions.run(panel.content, panel.sessionContext);
        }
      }
    });

    commands.addCommand(CommandIDs.openProfile, {
      label: 'Open Profile in a New Notebook',
      execute: async args => {
        const database = String(args.database ?? '');
        const openDir = String(args.openDir ?? '');
        if (!database) {
          Notification.error('jlprof: this profile has no .sqlite or .nsys-rep file to open');
          return;
        }
        let panel: NotebookPanel | undefined;
        try {
          panel = await createProfileNotebook(app, database, openDir);
        } catch (err) {
          Notification.error(await openFailure(app, openDir, err as Error), {
            autoClose: false
          });
          return;
        }
        if (panel && runOnOpen) {
          await panel.sessionContext.ready;
          await NotebookActions.runAll(panel.content, panel.sessionContext);
        }
      }
    });

    commands.addCommand(CommandIDs.insertProfile, {
      label: 'Insert Profile Cells into the Current Notebook',
      caption: 'Add %load_ext jlprof and %dlprof --database ... below the active cell',
      isEnabled: () => tracker.currentWidget !== null,
      execute: args => {
        const panel = tracker.currentWidget;
        const database = String(args.database ?? '');
        if (!panel || !database) {
          Notification.warning('jlprof: open a notebook first, then insert the profile');
          return;
        }
        const dir = PathExt.dirname(panel.context.path);
        for (const source of profileCells(database, dir)) {
          NotebookActions.insertBelow(panel.content);
          panel.content.activeCell?.model.sharedModel.setSource(source);
        }
        app.shell.activateById(panel.id);
      }
    });

    commands.addCommand(CommandIDs.openFile, {
      label: 'Open in jlprof (New Notebook)',
      caption: 'Analyse this nsys file or profile folder with %dlprof --database',
      icon: profileIcon,
      execute: async () => {
        const item = browserFactory?.tracker.currentWidget?.selectedItems().next();
        const path = item && !item.done ? item.value.path : undefined;
        if (!path) {
          Notification.warning('jlprof: select an .nsys-rep or nsys .sqlite file first');
          return;
        }
        try {
          const entry = await describeProfile(path);
          if (entry.error) {
            Notification.warning(`jlprof: ${entry.path}: ${entry.error}`);
          }
          await commands.execute(CommandIDs.openProfile, {
            database: entry.database ?? '',
            openDir: entry.open_dir
          });
        } catch (err) {
          Notification.error(`jlprof: ${(err as Error).message}`);
        }
      }
    });

    const sidebar = new ProfilesSidebar(commands, CommandIDs.openProfile, CommandIDs.insertProfile);
    sidebar.id = 'jlprof-profiles';
    sidebar.title.icon = profileIcon;
    sidebar.title.caption = 'jlprof Profiles';
    app.shell.add(sidebar, 'left', { rank: 650 });
    restorer?.add(sidebar, 'jlprof-profiles');

    commands.addCommand(CommandIDs.showProfiles, {
      label: 'Show jlprof Profiles',
      execute: () => app.shell.activateById(sidebar.id)
    });

    app.docRegistry.addFileType({
      name: 'jlprof-nsys-rep',
      displayName: 'Nsight Systems report',
      extensions: ['.nsys-rep', '.qdrep'],
      mimeTypes: ['application/octet-stream'],
      fileFormat: 'base64',
      icon: profileIcon
    });
    app.docRegistry.addFileType({
      name: 'jlprof-nsys-sqlite',
      displayName: 'SQLite database (nsys export?)',
      extensions: ['.sqlite'],
      mimeTypes: ['application/vnd.sqlite3'],
      fileFormat: 'base64',
      icon: profileIcon
    });

    if (palette) {
      const category = 'jlprof';
      for (const command of [
        CommandIDs.toggle,
        CommandIDs.profileRun,
        CommandIDs.showProfiles
      ]) {
        palette.addItem({ command, category });
      }
    }
  }
};

/**
 * In-place mode: make the notebook's kernel run under nsys before profiling (asks first: the
 * restart loses the kernel's variables). 'ready': it already did; 'restarted': it does now,
 * but the cells the profiled one needs must run again first; 'stop': leave the cell alone.
 */
async function prepareInPlace(panel: NotebookPanel): Promise<'ready' | 'restarted' | 'stop'> {
  const getKernel = () => panel.sessionContext.session?.kernel ?? null;
  const kernel = getKernel();
  const plan = planProfile('in-place', kernel ? await kernelState(kernel) : 'unknown');
  const problem = planProblem(plan);
  if (problem) {
    Notification.warning(problem, { autoClose: false });
    return 'stop';
  }
  if (plan === 'run') {
    return 'ready';
  }
  const answer = await showDialog({
    title: 'Restart the kernel under nsys?',
    body:
      "In-place mode profiles in this notebook's own kernel, which must run under nsys: " +
      'jlprof restarts it now (%dlprof enable). Its variables are lost: run the cells the ' +
      'profiled one needs again, then run it.',
    buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Restart in Place' })]
  });
  if (!answer.button.accept) {
    return 'stop';
  }
  const id = Notification.emit('jlprof: restarting the kernel in place...', 'in-progress', {
    autoClose: false
  });
  const failure = await enableInPlace(getKernel);
  if (failure) {
    Notification.update({ id, message: failure, type: 'error', autoClose: false });
    return 'stop';
  }
  Notification.update({
    id,
    message:
      'jlprof: the kernel runs in place; its variables were reset: run the cells the ' +
      'profiled one needs, then run it',
    type: 'success',
    autoClose: false
  });
  return 'restarted';
}

/**
 * Why a profile's notebook could not be created, in one line that says what to do (a toast
 * shows about 140 characters: the cause first). The likely cause is a folder deleted since
 * the sidebar listed it.
 */
async function openFailure(app: JupyterFrontEnd, openDir: string, err: Error): Promise<string> {
  try {
    await app.serviceManager.contents.get(openDir, { content: false });
  } catch (e) {
    if (e instanceof ServerConnection.ResponseError && e.response.status === 404) {
      return `jlprof: the folder '${openDir}' no longer exists: refresh the Profiles sidebar`;
    }
  }
  return `jlprof: could not create a notebook in '${openDir || '/'}': ${err.message}`;
}

/** How many profile-<stem>[-N].ipynb names to try before taking an Untitled one. */
const NAME_ATTEMPTS = 50;

/**
 * A free path for the new notebook in `openDir`. Created under its final name, never
 * created then renamed: a file that vanishes while the file browser lists its folder makes
 * the server answer the whole listing with 404, and JupyterLab shows 'Directory not found'.
 */
async function freeNotebookPath(
  contents: Contents.IManager,
  database: string,
  openDir: string
): Promise<string> {
  for (let attempt = 0; attempt < NAME_ATTEMPTS; attempt++) {
    const path = PathExt.join(openDir, profileNotebookName(database, attempt));
    try {
      await contents.get(path, { content: false });
    } catch (err) {
      if (err instanceof ServerConnection.ResponseError && err.response.status === 404) {
        return path; // name free
      }
      throw err;
    }
  }
  return (await contents.newUntitled({ path: openDir, type: 'notebook' })).path;
}

/** A new notebook beside the profile with the cells that reanalyse it; opened in the main area. */
async function createProfileNotebook(
  app: JupyterFrontEnd,
  database: string,
  openDir: string
): Promise<NotebookPanel | undefined> {
  const contents = app.serviceManager.contents;
  const path = await freeNotebookPath(contents, database, openDir);
  const kernelName = app.serviceManager.kernelspecs.specs?.default ?? 'python3';
  const spec = app.serviceManager.kernelspecs.specs?.kernelspecs[kernelName];
  const cells = profileCells(database, openDir).map(source => ({
    cell_type: 'code',
    execution_count: null,
    metadata: {},
    outputs: [],
    source
  }));
  await contents.save(path, {
    type: 'notebook',
    format: 'json',
    content: {
      cells,
      metadata: {
        kernelspec: {
          name: kernelName,
          display_name: spec?.display_name ?? kernelName,
          language: spec?.language ?? 'python'
        }
      },
      nbformat: 4,
      nbformat_minor: 5
    }
  });
  const widget = await app.commands.execute('docmanager:open', { path, factory: 'Notebook' });
  return widget instanceof NotebookPanel ? widget : undefined;
}

export default plugin;
