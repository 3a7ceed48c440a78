#!/usr/bin/env bash
# Sign dist/Swapless.app and wrap it in a DMG. macOS only; `make package` runs it.
#
#   packaging/macos/sign-and-dmg.sh [--no-dmg] [IDENTITY]
#
# IDENTITY (or SWAPLESS_CODESIGN_IDENTITY) defaults to "-": an ad hoc signature, which
# is enough to run the app on the Mac that built it (Apple Silicon runs no unsigned
# code). A real identity ("Developer ID Application: Name (TEAMID)") also turns on the
# hardened runtime with packaging/macos/entitlements.plist and a secure timestamp, as
# notarization requires. With SWAPLESS_NOTARY_PROFILE set (a profile saved by
# `xcrun notarytool store-credentials`), the DMG is notarized and stapled too.
set -euo pipefail

cd "$(dirname "$0")/../.."

MAKE_DMG=1
if [[ "${1:-}" == --no-dmg ]]; then
    MAKE_DMG=0
    shift
fi
APP=${SWAPLESS_APP:-dist/Swapless.app}
IDENTITY=${1:-${SWAPLESS_CODESIGN_IDENTITY:--}}
ENTITLEMENTS=packaging/macos/entitlements.plist

die() {
    printf 'sign-and-dmg: %s\n' "$*" >&2
    exit 1
}

[[ "$(uname -s)" == Darwin ]] || die "runs on macOS only"
[[ -d "$APP" ]] || die "$APP not found; build it first (make package)"

VERSION=$(/usr/libexec/PlistBuddy -c "Print :CFBundleShortVersionString" \
    "$APP/Contents/Info.plist")
DMG="dist/Swapless-$VERSION.dmg"

sign_args=(--force --sign "$IDENTITY")
if [[ "$IDENTITY" != "-" ]]; then
    sign_args+=(--options runtime --timestamp --entitlements "$ENTITLEMENTS")
fi

# Inside out: every Mach-O file first (the .so/.dylib files PyInstaller collected),
# then the bundle itself. Symlinks are skipped; codesign follows the bundle layout.
echo "sign-and-dmg: signing with identity '$IDENTITY'"
while IFS= read -r -d '' file; do
    if file -b "$file" | grep -q "Mach-O"; then
        codesign "${sign_args[@]}" "$file"
    fi
done < <(find "$APP/Contents/Frameworks" "$APP/Contents/MacOS" -type f -print0)
codesign "${sign_args[@]}" --deep "$APP"
codesign --verify --deep --strict --verbose=2 "$APP"
if ((MAKE_DMG == 0)); then
    exit 0
fi

# The DMG shows the app next to a link to /Applications: drag, drop, done.
staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
ditto "$APP" "$staging/Swapless.app"
ln -s /Applications "$staging/Applications"
rm -f "$DMG"
hdiutil create -volname "Swapless $VERSION" -srcfolder "$staging" \
    -fs HFS+ -format UDZO -ov "$DMG"

if [[ "$IDENTITY" != "-" ]]; then
    codesign --force --sign "$IDENTITY" --timestamp "$DMG"
fi
if [[ -n "${SWAPLESS_NOTARY_PROFILE:-}" ]]; then
    xcrun notarytool submit "$DMG" --keychain-profile "$SWAPLESS_NOTARY_PROFILE" --wait
    xcrun stapler staple "$DMG"
fi
echo "sign-and-dmg: $DMG"
