#!/bin/sh
# Install @NAME@ @VERSION@ for this user: no root, nothing written outside $HOME.
#   program   ${XDG_DATA_HOME:-~/.local/share}/@SLUG@-app (replaced on each install)
#   menu      .../applications/@SLUG@.desktop and .../icons/hicolor/256x256/apps/@SLUG@.png
#   commands  ~/.local/bin/specquant-app and ~/.local/bin/specquant (links)
# Models and conversations live apart, in .../specquant, so reinstalling or uninstalling keeps them (unless
# uninstall.sh is given --delete-data).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
data=${XDG_DATA_HOME:-$HOME/.local/share}
dest=$data/@SLUG@-app
bin=$HOME/.local/bin
icons=$data/icons/hicolor/256x256/apps

# The XDG spec ignores a relative XDG_DATA_HOME; installing relative to wherever this runs would be worse.
case "$data" in
  /*) ;;
  *) echo "install.sh: XDG_DATA_HOME '$data' is not an absolute path; set it to one, or unset it" >&2; exit 2 ;;
esac
# The menu entry quotes the program's path; these characters would need escapes the desktop spec barely defines.
# Spaces and letters beyond ASCII need none.
case "$dest" in
  *[\"\`\$\\%]*) echo "install.sh: cannot install into $dest (it contains a quote, \$, %, \` or \\)" >&2; exit 2 ;;
esac

# Copy to a temporary name, then swap: an interrupted install never leaves a half-copied program.
mkdir -p "$data" "$data/applications" "$icons" "$bin"
rm -rf "$dest.partial"
cp -a "$here/@SLUG@" "$dest.partial"
cp "$here/uninstall.sh" "$dest.partial/uninstall.sh"
rm -rf "$dest"
mv "$dest.partial" "$dest"

cp "$here/share/@SLUG@.png" "$icons/@SLUG@.png"
escaped=$(printf '%s\n' "$dest" | sed 's/[&|\\]/\\&/g')
sed "s|@APPDIR@|$escaped|g" "$here/share/@SLUG@.desktop" > "$data/applications/@SLUG@.desktop"
chmod 644 "$data/applications/@SLUG@.desktop"
for cmd in specquant-app specquant; do
  ln -sfn "$dest/$cmd" "$bin/$cmd"
done
# Refresh the menu and icon caches where the desktop has them; without them the entry appears on next login.
command -v update-desktop-database >/dev/null 2>&1 && update-desktop-database -q "$data/applications" 2>/dev/null || true
command -v gtk-update-icon-cache >/dev/null 2>&1 && gtk-update-icon-cache -q -t "$data/icons/hicolor" 2>/dev/null || true

echo "@NAME@ @VERSION@ is installed in $dest"
# Qt's X11 plugin needs some of the desktop's own libraries (libxcb-cursor0 is often missing): the program names
# those this system lacks and the command that installs them; the install itself stands either way.
if ! missing=$("$dest/specquant-app" --check-display 2>&1); then
  echo "$missing" >&2
fi
echo "Start it from your applications menu, or run: $bin/specquant-app"
case ":$PATH:" in
  *":$bin:"*) ;;
  *) echo "($bin is not on your PATH: add it to run specquant-app and specquant by name)" ;;
esac
echo "To uninstall: $dest/uninstall.sh"
