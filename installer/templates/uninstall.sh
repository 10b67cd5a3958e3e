#!/bin/sh
# Remove @NAME@: the program, its menu entry, icon and command links.
#   uninstall.sh                 keeps your models and conversations (in ${XDG_DATA_HOME:-~/.local/share}/specquant)
#   uninstall.sh --delete-data   removes them too, with your settings (the window's, presets, MCP servers), the
#                                saved prompt states and the per-machine caches
set -eu
delete_data=no
case "${1:-}" in
  "") ;;
  --delete-data) delete_data=yes ;;
  *) echo "uninstall.sh: unknown option '$1' (the only one is --delete-data: remove your models and conversations too)" >&2; exit 2 ;;
esac
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
if [ "$delete_data" = yes ]; then
  # Settings: the window's (Qt keeps them under the organisation name) and the runtime's (presets, MCP servers,
  # approvals). Caches: the saved prompt states and the per-machine verdicts (CPU kernels, GPUs, workers); a
  # source install's wheels stay.
  config=${XDG_CONFIG_HOME:-$HOME/.config}
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/specquant
  rm -rf "$data/specquant" "$config/SpecQuant" "$config/specquant" "$cache/prompt-states" "$cache/cpu-variant" \
    "$cache/gpu-probe" "$cache/rpc"
  echo "@NAME@ is uninstalled, and your models and conversations ($data/specquant) are deleted."
else
  echo "@NAME@ is uninstalled. Your models and conversations are still in $data/specquant:"
  echo "delete that folder, or run this script again with --delete-data, to remove them too."
fi
