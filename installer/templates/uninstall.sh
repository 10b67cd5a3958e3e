#!/bin/sh
# Remove @NAME@: the program, its menu entry, icon and command links. Models and conversations are kept.
set -eu
data=${XDG_DATA_HOME:-$HOME/.local/share}
dest=$data/@SLUG@-app
rm -f "$data/applications/@SLUG@.desktop" "$data/icons/hicolor/256x256/apps/@SLUG@.png"
for cmd in specquant-app specquant; do
  link=$HOME/.local/bin/$cmd
  # Only links to this install: a specquant installed another way (pip, a source checkout) stays.
  if [ -L "$link" ] && [ "$(readlink "$link")" = "$dest/$cmd" ]; then
    rm -f "$link"
  fi
done
rm -rf "$dest"
command -v update-desktop-database >/dev/null 2>&1 && update-desktop-database -q "$data/applications" 2>/dev/null || true
echo "@NAME@ is uninstalled. Your models and conversations are still in $data/specquant; delete that folder to remove them too."
