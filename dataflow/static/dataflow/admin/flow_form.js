/* The flow form lists the options of every source, format and sink type, each type's in a
 * fieldset of its own; this shows only those of the chosen types. Without it every fieldset
 * is shown, and each says for which type it counts: the server reads only the chosen ones. */
(function () {
  "use strict";

  var SECTIONS = ["source", "format", "sink"];

  function chosenType(section) {
    var select = document.getElementById("id_" + section + "_type");
    if (select) {
      return select.value;
    }
    // A page the user may only view shows the type as text.
    var shown = document.querySelector(".field-" + section + "_type .readonly");
    return shown ? shown.textContent.trim() : null;
  }

  function showChosen(section) {
    var type = chosenType(section);
    if (type === null) {
      return;
    }
    var fieldsets = document.querySelectorAll("fieldset.adf-" + section + "-options");
    Array.prototype.forEach.call(fieldsets, function (fieldset) {
      fieldset.hidden = !fieldset.classList.contains("adf-type-" + type);
    });
  }

  function init() {
    SECTIONS.forEach(function (section) {
      var select = document.getElementById("id_" + section + "_type");
      if (select) {
        select.addEventListener("change", function () {
          showChosen(section);
        });
      }
      showChosen(section);
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
